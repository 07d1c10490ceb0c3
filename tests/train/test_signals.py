"""A run stopped by a signal writes a checkpoint, says where it stopped and how to resume in one line, exits with
the conventional code, and its resume logs exactly what an uninterrupted run logs (as after SIGKILL:
tests/train/test_resume.py). A second Ctrl-C stops at once and leaves the last complete checkpoint intact.
Two ranks (hardware=cpu_ddp): a Ctrl-C stops both at the same iteration; a SIGKILL of the launching process
takes the ranks with it, and the resume matches too."""

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
from tests.conftest import cli_env, records_by_iteration

pytestmark = pytest.mark.slow

COMMON = ["+debug=fast", "trainer.iterations=6", "trainer.save_every=4", "trainer.eval_every=0", "trainer.keep_last=5"]
ALGORITHMS = {"grpo": ["+algo=grpo"], "gigpo": ["+algo=gigpo"]}
DDP = ["hardware=cpu_ddp", "trainer.tasks_per_iteration=4"]


def _command(run_dir: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "agentrl.cli", "train", *COMMON, *extra, f"hydra.run.dir={run_dir}"]


def _logged(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return -1
    lines = [line for line in path.read_text().splitlines() if line.strip().endswith("}")]
    return max((json.loads(line)["iteration"] for line in lines), default=-1)


def _signal_at(command, env, run_dir: Path, cwd: Path, signals: list[int], after: int = 1, gap: float = 0.0):
    """Start a run; once iteration `after` is logged, send `signals` (`gap` seconds apart); return the finished
    process's (exit code, stderr, seconds from the first signal to the exit)."""
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and _logged(run_dir) < after:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before the signal: " + proc.stderr.read()[-2000:]
    sent = time.time()
    for index, signum in enumerate(signals):
        if index:
            time.sleep(gap)
        proc.send_signal(signum)
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err, time.time() - sent


def _resume(line: str, env, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """Run the resume command the stop line printed, as a user would paste it."""
    command = shlex.split(line.split("resume: ", 1)[1])
    assert command[:2] == ["agentrl", "train"] and command[-1] == "trainer.resume=auto", command
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", *command[1:]],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return done, time.time() - started


@pytest.fixture(scope="module")
def straight(cache_dir, tmp_path_factory):
    """The uninterrupted runs' metrics, one per configuration, made when first asked for."""
    made: dict[str, dict] = {}

    def get(name: str, extra: list[str]) -> dict[int, dict]:
        if name not in made:
            run_dir = tmp_path_factory.mktemp(f"straight-{name}") / "r"
            done = subprocess.run(
                _command(run_dir, extra), env=cli_env(cache_dir), cwd=run_dir.parent, capture_output=True, text=True
            )
            assert done.returncode == 0, done.stderr[-3000:]
            made[name] = records_by_iteration(run_dir)
        return made[name]

    return get


def _stop_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    return lines[-1]


@pytest.mark.parametrize(
    "name,signum",
    [("grpo", signal.SIGTERM), ("gigpo", signal.SIGTERM), ("grpo", signal.SIGINT)],
    ids=["grpo-SIGTERM", "gigpo-SIGTERM", "grpo-SIGINT"],
)
def test_stopped_by_a_signal_then_resumed_matches_an_uninterrupted_run(name, signum, straight, cache_dir, tmp_path):
    env, extra = cli_env(cache_dir), ALGORITHMS[name]
    run_dir = tmp_path / "stopped"
    code, err, stop_s = _signal_at(_command(run_dir, extra), env, run_dir, tmp_path, [signum])
    assert code == 128 + signum, err[-3000:]
    assert "Traceback" not in err
    line = _stop_line(err)
    name_of = signal.Signals(signum).name
    assert line.startswith(f"stopped on {name_of} after iteration "), line
    stopped_at = int(line.split("after iteration ")[1].split()[0])
    assert 1 <= stopped_at < 6 and f"of 6; checkpoint {run_dir / 'checkpoints' / f'checkpoint-{stopped_at}'};" in line
    assert problem(run_dir / "checkpoints" / f"checkpoint-{stopped_at}") is None, "the stop's checkpoint is complete"
    assert (run_dir / "checkpoints" / "last").resolve().name == f"checkpoint-{stopped_at}"
    assert not (run_dir / "checkpoints" / f"checkpoint-{stopped_at}" / "training_args.bin").exists()
    assert sorted(records_by_iteration(run_dir)) == list(range(1, stopped_at + 1)), (
        "the stop finishes its iteration and logs it"
    )

    resumed, resume_s = _resume(line, env, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"(iteration {stopped_at})" in resumed.stdout
    expected, got = straight(name, extra), records_by_iteration(run_dir)
    assert sorted(got) == sorted(expected) == list(range(1, 7))
    for iteration in range(1, 7):
        assert got[iteration] == expected[iteration], f"iteration {iteration} differs after the resume"
    print(f"{name} {name_of}: signal to exit {stop_s:.1f} s, resume to the end {resume_s:.1f} s")


def test_a_second_ctrl_c_stops_at_once_with_the_last_checkpoint_intact(straight, cache_dir, tmp_path):
    env, extra = cli_env(cache_dir), ALGORITHMS["grpo"]
    run_dir = tmp_path / "interrupted"
    code, err, stop_s = _signal_at(
        _command(run_dir, extra), env, run_dir, tmp_path, [signal.SIGINT, signal.SIGINT], after=5, gap=0.05
    )
    assert code == 130, err[-3000:]
    assert "Traceback" not in err
    line = _stop_line(err)
    assert line.startswith("stopped at once on a second SIGINT; the last complete checkpoint is "), line
    last = (run_dir / "checkpoints" / "last").resolve()
    assert problem(last) is None and str(last) in line
    resumed, _ = _resume(line, env, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert records_by_iteration(run_dir) == straight("grpo", extra)
    print(f"second SIGINT: signal to exit {stop_s:.1f} s")


def test_two_ranks_stop_together_on_ctrl_c_and_resume(straight, cache_dir, tmp_path):
    env, extra = cli_env(cache_dir), [*ALGORITHMS["grpo"], *DDP]
    run_dir = tmp_path / "ddp-stopped"
    code, err, stop_s = _signal_at(_command(run_dir, extra), env, run_dir, tmp_path, [signal.SIGINT], after=2)
    assert code == 130, err[-3000:]
    line = _stop_line(err)
    assert line.startswith("stopped on SIGINT after iteration "), line
    stopped_at = int(line.split("after iteration ")[1].split()[0])
    checkpoint = run_dir / "checkpoints" / f"checkpoint-{stopped_at}"
    assert problem(checkpoint) is None and (checkpoint / "agentrl_state_rank1.json").is_file(), "both ranks saved"
    resumed, resume_s = _resume(line, env, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert records_by_iteration(run_dir) == straight("grpo-ddp", extra)
    print(f"two ranks SIGINT: signal to exit {stop_s:.1f} s, resume to the end {resume_s:.1f} s")


def _rank_processes(run_dir: Path) -> list[int]:
    """Processes whose command line names the run folder (the launcher, accelerate, the ranks)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(run_dir) in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_two_ranks_follow_a_killed_launcher_and_resume(straight, cache_dir, tmp_path):
    if not Path("/proc/self").is_dir():
        pytest.skip("finds the rank processes through /proc")
    env, extra = cli_env(cache_dir), [*ALGORITHMS["grpo"], *DDP]
    run_dir = tmp_path / "ddp-killed"
    code, err, _ = _signal_at(_command(run_dir, extra), env, run_dir, tmp_path, [signal.SIGKILL], after=5)
    assert code == -signal.SIGKILL
    deadline = time.time() + 30
    while _rank_processes(run_dir) and time.time() < deadline:
        time.sleep(0.1)
    assert _rank_processes(run_dir) == [], "the ranks outlived their launcher"
    assert problem((run_dir / "checkpoints" / "last").resolve()) is None
    resumed = subprocess.run(
        _command(run_dir, [*extra, "trainer.resume=auto"]), env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert records_by_iteration(run_dir) == straight("grpo-ddp", extra)
