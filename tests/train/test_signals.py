"""A run stopped by a signal writes a checkpoint, says where it stopped and how to resume in one line, exits with
the conventional code, and its resume logs exactly what an uninterrupted run logs (as after SIGKILL:
tests/train/test_resume.py). A second Ctrl-C stops at once and leaves the last complete checkpoint intact.
Two ranks (hardware=cpu_ddp): a Ctrl-C stops both at the same iteration; a SIGKILL of the launching process
takes the ranks with it, and the resume matches too."""

from __future__ import annotations

import json
import os
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
ALGORITHMS = {
    "grpo": ["+algo=grpo"],
    "gigpo": ["+algo=gigpo"],
    # rows generated ahead: the worker, mid-job when the update ends, stops too; the job's weights are checkpointed
    "gigpo-staleness-1": ["+algo=gigpo", "rollout.max_staleness=1"],
    # a held-out evaluation every 2 iterations: one stopped in iteration 2's update runs it before its checkpoint
    "grpo-eval-2": ["+algo=grpo", "trainer.eval_every=2"],
}
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
    """Run the command the stop line printed through a shell, as a user would paste it."""
    pasted = line.split("resume: ", 1)[1] if "resume: " in line else line.split("start again: ", 1)[1]
    command = shlex.split(pasted)
    assert command[:2] == ["agentrl", "train"] and command[-1] == "trainer.resume=auto", command
    assert "'" not in pasted, f"quoted though neither Hydra nor the shell needs it: {pasted}"
    path = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this environment's `agentrl`
    started = time.time()
    done = subprocess.run(
        ["bash", "-c", pasted], env={**env, "PATH": path}, cwd=cwd, capture_output=True, text=True, timeout=900
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


def _in_phase(run_dir: Path, extra: list[str], phase: str, iteration: int, signum: int) -> list[str]:
    """The run's command with a signal sent to itself at `phase` of `iteration` (tests/train/signal_in_phase.py)."""
    script = str(Path(__file__).with_name("signal_in_phase.py"))
    command = _command(run_dir, extra)
    return [sys.executable, script, phase, str(iteration), signal.Signals(signum).name, *command[3:]]


def _timed(command, env, cwd: Path) -> tuple[int, str, float]:
    """Run it; (exit code, stderr, seconds from the signal's acknowledgement to the exit)."""
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines, acknowledged = [], None
    for line in proc.stderr:
        lines.append(line)
        if acknowledged is None and line.startswith(("SIGTERM: ", "SIGINT: ")):
            acknowledged = time.time()
    code = proc.wait(timeout=600)
    return code, "".join(lines), time.time() - (acknowledged or time.time())


# (algorithm, signal, phase, iteration): a stop during a rollout puts back the iteration's start and checkpoints the
# iteration before, at once (iteration 3: checkpoint-2 is written then; iteration 5: checkpoint-4 is already on
# disk, save_every=4; iteration 1: there is nothing to save); a stop during an update finishes that iteration.
PHASES = [
    ("grpo", signal.SIGTERM, "rollout", 3),
    ("gigpo", signal.SIGTERM, "rollout", 5),
    ("grpo", signal.SIGINT, "rollout", 1),
    ("grpo", signal.SIGTERM, "update", 3),
    ("gigpo", signal.SIGINT, "update", 2),
    ("gigpo-staleness-1", signal.SIGTERM, "update", 3),
    ("grpo-eval-2", signal.SIGTERM, "update", 2),
]


@pytest.mark.parametrize("name,signum,phase,iteration", PHASES, ids=[f"{a}-{s.name}-{p}-{i}" for a, s, p, i in PHASES])
def test_stopped_by_a_signal_then_resumed_matches_an_uninterrupted_run(
    name, signum, phase, iteration, straight, cache_dir, tmp_path
):
    env, extra = cli_env(cache_dir), ALGORITHMS[name]
    run_dir = tmp_path / "stopped"
    code, err, stop_s = _timed(_in_phase(run_dir, extra, phase, iteration, signum), env, tmp_path)
    assert code == 128 + signum, err[-3000:]
    assert "Traceback" not in err
    name_of, line = signal.Signals(signum).name, _stop_line(err)
    if phase == "rollout" and iteration == 1:
        assert f"{name_of}: abandoning the first iteration's rollout (nothing to save yet)" in err
        assert line.startswith(f"stopped on {name_of} during the first iteration's rollout (nothing to save yet); "), (
            line
        )
        assert not (run_dir / "checkpoints" / "last").exists()
        stopped_at = 0
    elif phase == "rollout":
        stopped_at = iteration - 1
        assert (
            f"{name_of}: abandoning the rollout of iteration {iteration} (the model has not changed), "
            f"writing checkpoint-{stopped_at}" in err
        )
        assert line.startswith(
            f"stopped on {name_of} after iteration {stopped_at} of 6 (the rollout of iteration {iteration} was "
            f"abandoned); checkpoint {run_dir / 'checkpoints' / f'checkpoint-{stopped_at}'}; resume: "
        ), line
    else:
        stopped_at = iteration
        if "trainer.eval_every=2" in extra:  # the evaluation due at this iteration runs first, and is said
            assert (
                f"{name_of}: finishing the update of iteration {iteration} and its held-out evaluation, "
                "then writing a checkpoint" in err
            )
            assert f"stopping: the held-out evaluation of iteration {iteration} runs first (4 episodes)" in err
            assert "eval/success" in records_by_iteration(run_dir)[iteration]
        else:
            assert f"{name_of}: finishing the update of iteration {iteration}, then writing a checkpoint" in err
        assert line.startswith(
            f"stopped on {name_of} after iteration {stopped_at} of 6; "
            f"checkpoint {run_dir / 'checkpoints' / f'checkpoint-{stopped_at}'}; resume: "
        ), line
    if stopped_at:
        assert problem(run_dir / "checkpoints" / f"checkpoint-{stopped_at}") is None, "the stop's checkpoint is whole"
        assert (run_dir / "checkpoints" / "last").resolve().name == f"checkpoint-{stopped_at}"
        assert not (run_dir / "checkpoints" / f"checkpoint-{stopped_at}" / "training_args.bin").exists()
    logged = sorted(records_by_iteration(run_dir)) if (run_dir / "metrics.jsonl").exists() else []
    first = [0] if "trainer.eval_every=2" in extra else []  # the evaluation before the first iteration
    assert logged == first + list(range(1, stopped_at + 1)), (
        "an update finishes and is logged; an abandoned rollout is not"
    )

    resumed, resume_s = _resume(line, env, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    if stopped_at:
        assert f"(iteration {stopped_at})" in resumed.stdout
    expected, got = straight(name, extra), records_by_iteration(run_dir)
    assert sorted(got) == sorted(expected) == first + list(range(1, 7))
    for number in first + list(range(1, 7)):
        assert got[number] == expected[number], f"iteration {number} differs after the resume"
    print(f"{name} {name_of} in the {phase} of iteration {iteration}: acknowledged to exit {stop_s:.2f} s")


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


@pytest.mark.parametrize("phase,iteration", [("rollout", 3), ("update", 2)])
def test_two_ranks_stop_together_on_ctrl_c_and_resume(phase, iteration, straight, cache_dir, tmp_path):
    """Rank 0 sends the launching process a SIGINT at the phase (tests/train/signal_hooks/sitecustomize.py); both
    ranks abandon that rollout, or finish that update, together."""
    env, extra = cli_env(cache_dir), [*ALGORITHMS["grpo"], *DDP]
    hooks = Path(__file__).with_name("signal_hooks")
    env = {
        **env,
        "PYTHONPATH": f"{hooks}{os.pathsep}{env['PYTHONPATH']}",
        "AGENTRL_TEST_SIGNAL": f"{phase} {iteration} SIGINT",
    }
    run_dir = tmp_path / "ddp-stopped"
    code, err, stop_s = _timed(_command(run_dir, extra), env, tmp_path)
    assert code == 130, err[-3000:]
    assert "SIGINT: the ranks abandon a rollout in progress, or finish an update in progress" in err
    line = _stop_line(err)
    stopped_at = iteration - 1 if phase == "rollout" else iteration
    abandoned = f" (the rollout of iteration {iteration} was abandoned)" if phase == "rollout" else ""
    assert line.startswith(f"stopped on SIGINT after iteration {stopped_at} of 6{abandoned}; "), line
    checkpoint = run_dir / "checkpoints" / f"checkpoint-{stopped_at}"
    assert problem(checkpoint) is None and (checkpoint / "agentrl_state_rank1.json").is_file(), "both ranks saved"
    assert sorted(records_by_iteration(run_dir)) == list(range(1, stopped_at + 1))
    resumed, resume_s = _resume(line, cli_env(cache_dir), tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert records_by_iteration(run_dir) == straight("grpo-ddp", extra)
    print(f"two ranks SIGINT in the {phase}: acknowledged to exit {stop_s:.1f} s, resume to the end {resume_s:.1f} s")


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
