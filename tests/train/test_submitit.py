"""Jobs under submitit's launcher, through its local executor (hydra/launcher=submitit_local), which runs each job
in a process of its own as Slurm would on a node:

- a job sent submitit's preemption signal (USR2) finishes its iteration, writes a checkpoint and is requeued by
  submitit with trainer.resume=auto (hydra_plugins/agentrl_requeue); the requeued job resumes, and the metrics equal an
  uninterrupted run's;
- a failed job makes the sweeping command exit non-zero and name the job, as with Hydra's basic launcher.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import cli_env, records_by_iteration
from tests.train.test_resume import _command

pytestmark = pytest.mark.slow

pytest.importorskip(
    "hydra_plugins.hydra_submitit_launcher",
    reason="needs the sweep extra (hydra-submitit-launcher): pip install -e '.[sweep]'",
)

LOCAL = ["hydra/launcher=submitit_local", "hydra.launcher._target_=hydra_plugins.agentrl_requeue.LocalLauncher"]


def _sweep_command(sweep: Path, extra: list[str]) -> list[str]:
    command = _command(sweep, extra)
    return [*command[:4], "-m", *command[4:-1], *LOCAL, f"hydra.sweep.dir={sweep}"]


def _job_process(sweep: Path) -> int | None:
    """The pid of the submitit task that runs the job (python -m submitit.core._submit <its folder>)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = b" ".join(args).decode(errors="replace")
        if "submitit.core._submit" in text and str(sweep) in text:
            return int(entry.name)
    return None


def test_a_preempted_job_checkpoints_is_requeued_and_resumes(cache_dir, tmp_path):
    if not Path("/proc/self").is_dir():
        pytest.skip("finds the submitit task through /proc")
    env, extra = cli_env(cache_dir), ["+algo=grpo"]
    straight = tmp_path / "straight"
    done = subprocess.run(_command(straight, extra), env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        _sweep_command(sweep, extra), env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    metrics, deadline = sweep / "0" / "metrics.jsonl", time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if metrics.is_file() and any(json.loads(line)["iteration"] >= 1 for line in metrics.read_text().splitlines()):
            break
        time.sleep(0.05)
    task = _job_process(sweep)
    assert task is not None, "no submitit task found"
    import os

    os.kill(task, signal.SIGUSR2)  # what Slurm sends before the time limit, and submitit's local executor too
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    logs = "\n".join(p.read_text() for p in (sweep / ".submitit").rglob("*.out")) + "\n".join(
        p.read_text() for p in (sweep / ".submitit").rglob("*.err")
    )
    assert "stopped on SIGUSR2 after iteration" in logs, logs[-3000:]
    assert "Requeued job" in logs and "resuming from" in logs, logs[-3000:]
    assert records_by_iteration(sweep / "0") == records_by_iteration(straight)


def test_a_failed_job_under_submitit_fails_the_sweep_and_is_named(run_cli, tmp_path):
    sweep = tmp_path / "sweep"
    result = run_cli(
        "train",
        "-m",
        "+debug=fast",
        "trainer.iterations=1",
        "trainer.eval_every=0",
        "model.path=/does/not/exist,null",
        *LOCAL,
        f"hydra.sweep.dir={sweep}",
        timeout=900,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stderr[-3000:]
    assert lines and lines[-1].startswith("error: 1 job(s) failed"), lines[-3:]
    assert f"{sweep / '0'} (" in lines[-1] and "model.path=/does/not/exist" in lines[-1]
    assert (sweep / "1" / "checkpoints" / "last").is_dir(), "the other job finished"
