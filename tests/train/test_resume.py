"""Exact resume: a run killed with SIGKILL between checkpoints and resumed logs what an uninterrupted run logs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import cli_env, records_by_iteration

pytestmark = pytest.mark.slow

GAME_2048 = [
    "env=tools",
    "env.factory=agentrl.examples.game_2048:Game2048",
    "env.reward_funcs=[agentrl.examples.game_2048:reward_score]",
    "env.prompt=Play 2048 with the move tool.",
    "env.expert=agentrl.examples.game_2048:expert",
    "env.max_steps=8",
    "env.success_reward=16",
    # a build that moves (+debug=fast's 30 warm-up steps write broken calls, and no tile falls), and room in the
    # prompt for 8 turns of boards: the episodes are scored, and the tiles' draws reach the metrics
    "model.tiny.warmup_steps=150",
    "rollout.max_prompt_tokens=1024",
]
ALGORITHMS = {
    "grpo": ["+algo=grpo"],
    "gigpo": ["+algo=gigpo"],
    "arpo": ["+algo=arpo", "trainer.task_pool=2"],  # tasks recur, so the buffer fills and injects
    "epo": ["+algo=epo"],
    # several optimizer steps per iteration: the optimizer's step counts and moments must come back too
    "gigpo-mini-batches": ["+algo=gigpo", "trainer.mini_batch_size=4", "trainer.epochs=2"],
    # rows generated ahead: the checkpoint holds the jobs not yet trained on (rows, or tasks and weights)
    "gigpo-staleness-1": ["+algo=gigpo", "rollout.max_staleness=1"],
    "arpo-staleness-2": ["+algo=arpo", "trainer.task_pool=2", "rollout.max_staleness=2"],
    # the tool-calling route on TRL's 2048 shape (its tiles fall from python's global random, unseeded), GiGPO's
    # anchors on its boards, and rows generated ahead
    "tools-2048-gigpo-staleness-1": [*GAME_2048, "+algo=gigpo", "rollout.max_staleness=1"],
}
COMMON = ["+debug=fast", "trainer.iterations=6", "trainer.save_every=2", "trainer.eval_every=0", "trainer.keep_last=5"]


def _command(run_dir: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "agentrl.cli", "train", *COMMON, *extra, f"hydra.run.dir={run_dir}"]


def _kill_after_a_checkpoint(command, env, run_dir: Path, cwd: Path) -> None:
    """Start a run and SIGKILL it once a checkpoint exists and a later iteration has been logged."""
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 600
    try:
        while time.time() < deadline and proc.poll() is None:
            if metrics.is_file() and any(
                json.loads(line)["iteration"] >= 3
                for line in metrics.read_text().splitlines()
                if line.strip().endswith("}")
            ):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_killed_and_resumed_run_matches_an_uninterrupted_one(name, cache_dir, tmp_path):
    env = cli_env(cache_dir)
    extra = ALGORITHMS[name]
    straight = tmp_path / "straight"
    done = subprocess.run(_command(straight, extra), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    killed = tmp_path / "killed"
    _kill_after_a_checkpoint(_command(killed, extra), env, killed, tmp_path)
    checkpoints = sorted(p.name for p in (killed / "checkpoints").glob("checkpoint-*"))
    assert checkpoints and "checkpoint-6" not in checkpoints

    resumed = subprocess.run(
        _command(killed, [*extra, "trainer.resume=auto"]),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stdout

    expected, got = records_by_iteration(straight), records_by_iteration(killed)
    assert sorted(got) == sorted(expected) == list(range(1, 7))  # no iteration lost or logged twice
    for iteration in range(1, 7):
        assert got[iteration] == expected[iteration], f"iteration {iteration} differs after the resume"
