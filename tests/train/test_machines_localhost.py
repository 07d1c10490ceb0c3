"""Two machines on one host: two `agentrl train` processes with hardware.num_machines=2, machine_rank 0 and 1, one
gloo rank each (hardware=cpu_ddp's two ranks, split over the machines), main_process_ip 127.0.0.1, one run folder.

- they log the same metrics as hardware=cpu_ddp on one machine (every value but the times);
- SIGTERM to either launcher stops both with one checkpoint and the resume line;
- a machine that never joins ends the other within hardware.join_timeout_s, with one line that names it.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.checkpoints import problem
from agentrl.train.distributed import free_port
from tests.conftest import cli_env, records_by_iteration
from tests.train.test_signals import _logged  # the last iteration a run folder has logged

pytestmark = pytest.mark.slow

SMALL = ["+debug=fast", "trainer.tasks_per_iteration=4", "seed=3"]
LONGER = ["trainer.iterations=6", "trainer.save_every=4", "trainer.eval_every=0", "trainer.keep_last=5"]


def _env(cache_dir: Path) -> dict:
    # the same torch threads in both layouts: one machine's torchrun sets 1 for its two ranks; a machine of one
    # rank would take both cores, and the two "machines" share them
    return {**cli_env(cache_dir), "OMP_NUM_THREADS": "1"}


def _machine(rank: int, port: int, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentrl.cli",
        "train",
        *extra,
        "hardware=cpu_ddp",
        "hardware.num_machines=2",
        f"hardware.machine_rank={rank}",
        "hardware.main_process_ip=127.0.0.1",
        f"hardware.main_process_port={port}",
    ]


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_machine_left():
    """A failed test leaves no machine running (its ranks follow their launcher: agentrl/train/stopping.py)."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def _start(rank: int, port: int, extra: list[str], env: dict, cwd: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        _machine(rank, port, extra), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    STARTED.append(proc)
    return proc


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_two_machines_log_what_one_machine_with_two_ranks_logs(cache_dir, tmp_path):
    env = _env(cache_dir)
    one = tmp_path / "one-machine"
    done = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "train", *SMALL, "hardware=cpu_ddp", f"hydra.run.dir={one}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    two, port = tmp_path / "two-machines", free_port()
    extra = [*SMALL, f"hydra.run.dir={two}"]
    started = time.time()
    procs = [_start(rank, port, extra, env, tmp_path) for rank in (1, 0)]  # machine 1 first: it waits for 0
    outs = [proc.communicate(timeout=900) for proc in procs]
    seconds = time.time() - started
    (out1, err1), (out0, err0) = outs
    assert [proc.returncode for proc in procs] == [0, 0], err0[-3000:] + err1[-3000:]
    assert "launching 1 of the 2 ranks (ddp) on machine 1 of 2 through accelerate" in out1
    assert "launching 1 of the 2 ranks (ddp) on machine 0 of 2 through accelerate" in out0
    assert "held-out success" in out0 and "held-out success" not in out1
    for err in (err0, err1):
        assert "Traceback" not in err and "Error waiting on exit barrier" not in err, err[-3000:]

    expected, got = records_by_iteration(one), records_by_iteration(two)
    assert sorted(got) == sorted(expected) == [0, 1, 2]
    for iteration in expected:
        assert got[iteration] == expected[iteration], f"iteration {iteration} differs from one machine's"
    assert got[1]["rollout/rows"] >= 8, "both machines' rows are counted: 4 groups of 2 episodes"

    checkpoint = two / "checkpoints" / "last"
    assert problem(checkpoint.resolve()) is None and (checkpoint / "agentrl_state_rank1.json").is_file()
    overrides = (two / ".hydra" / "overrides.yaml").read_text()
    assert "hardware.machine_rank=0" in overrides, "machine 0 writes the run's .hydra/, machine 1 leaves it"
    assert json.loads((two / "ended.json").read_text())["status"] == "finished"
    shown = {k: got[2][k] for k in ("train/loss", "train/grad_norm", "rollout/rows", "eval/success")}
    print(f"two localhost machines, {seconds:.0f} s; iteration 2 as on one machine: {shown}")


@pytest.mark.parametrize("signalled", [0, 1])
def test_sigterm_to_either_machine_stops_both_with_one_checkpoint(signalled, cache_dir, tmp_path):
    env, run_dir, port = _env(cache_dir), tmp_path / "stopped", free_port()
    extra = [*SMALL, *LONGER, f"hydra.run.dir={run_dir}"]
    procs = {rank: _start(rank, port, extra, env, tmp_path) for rank in (0, 1)}
    deadline = time.time() + 600
    while time.time() < deadline and all(p.poll() is None for p in procs.values()) and _logged(run_dir) < 1:
        time.sleep(0.05)
    ended = {rank: p.communicate()[1][-2000:] for rank, p in procs.items() if p.poll() is not None}
    assert not ended, f"a machine ended before the signal: {ended}"
    procs[signalled].send_signal(signal.SIGTERM)
    outs = {rank: procs[rank].communicate(timeout=600) for rank in (0, 1)}
    for rank, (_, err) in outs.items():
        assert procs[rank].returncode == 128 + signal.SIGTERM, f"machine {rank}: " + err[-3000:]
        assert "Traceback" not in err, err[-3000:]
    lines = {rank: _lines(err)[-1] for rank, (_, err) in outs.items()}
    assert lines[0].startswith("stopped on SIGTERM after iteration "), lines[0]
    checkpoint = Path(lines[0].split("; checkpoint ", 1)[1].split(";", 1)[0])
    assert problem(checkpoint) is None and (checkpoint / "agentrl_state_rank1.json").is_file(), "both ranks saved"
    written = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("checkpoint-"))
    assert written == [checkpoint.name], "one checkpoint, the stop's"
    for rank, line in lines.items():
        assert line.split("; resume: ")[0] == lines[0].split("; resume: ")[0], "both machines say the same stop"
        resume = shlex.split(line.split("; resume: ", 1)[1])
        assert resume[:2] == ["agentrl", "train"] and resume[-1] == "trainer.resume=auto"
        assert f"hardware.machine_rank={rank}" in resume and f"hydra.run.dir={run_dir}" in resume
    if signalled == 1:  # the resume lines, run on both machines again, finish the run
        resumed = {rank: _start(rank, port, [*extra, "trainer.resume=auto"], env, tmp_path) for rank in (0, 1)}
        for rank, proc in resumed.items():
            _, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, f"machine {rank}: " + err[-3000:]
        assert sorted(records_by_iteration(run_dir)) == list(range(1, 7))


@pytest.mark.parametrize("alone,missing", [(0, "machine 1 of 2 did not join"), (1, "machine 0 (the main process")])
def test_a_machine_that_never_joins_ends_the_other_within_the_timeout(alone, missing, cache_dir, tmp_path):
    timeout = 5
    extra = [*SMALL, f"hardware.join_timeout_s={timeout}", f"hydra.run.dir={tmp_path / 'alone'}"]
    proc = _start(alone, free_port(), extra, _env(cache_dir), tmp_path)
    waiting = None
    for line in proc.stdout:
        if line.startswith(f"machine {alone} of 2: waiting up to {timeout} s"):
            waiting = time.time()
            break
    assert waiting is not None, proc.stderr.read()[-3000:]
    _, err = proc.communicate(timeout=120)
    waited = time.time() - waiting
    assert proc.returncode == 2, err[-3000:]
    assert waited < timeout + 4, f"ended {waited:.1f} s after it began to wait"
    # one line (before it, at most the tiny model's build on a fresh cache: "Writing model shards")
    assert "Traceback" not in err and [line for line in _lines(err) if "error" in line.lower()] == _lines(err)[-1:]
    assert _lines(err)[-1].startswith(f"error: {missing}"), err
    assert f"within hardware.join_timeout_s={timeout} s" in err
    print(f"machine {alone} alone: waited {waited:.1f} s for a join timeout of {timeout} s")
