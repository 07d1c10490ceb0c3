"""rollout.max_staleness=1 on TRL's colocated vLLM engine through the real CLI: the schedule and its metrics, rows
that carry the engine's log-probs of the version that generated them, two runs of one seed in other timings logging
the same metrics, and a resume that generates the checkpoint's jobs again to the same rows."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from agentrl.train.async_rollout import ASYNC_ROLLOUTS
from tests.conftest import records_by_iteration
from tests.with_vllm.conftest import NEEDS_VLLM, VLLM

pytestmark = NEEDS_VLLM
RUN = [
    "+debug=fast",
    "logger=none",
    *VLLM,
    "rollout.max_staleness=1",
    "trainer.iterations=4",
    "trainer.save_every=1",
    "trainer.keep_last=5",
]
# Steps that take time (a sleep in the environment's process): the worker is still on iteration 2's job when
# iteration 1's checkpoint is written, and the worker and the trainer's thread (its evaluation at iteration 2 waits
# for the engine) meet in another order than without
SLOW = "env.step_latency_s=0.05"
GAP = 1e-4  # |trainer - vLLM| per-token log-prob with the same weights (tests/with_vllm/test_vllm_colocate.py)


def train(run_cli, where: Path, *overrides: str) -> Path:
    result = run_cli("train", *RUN, f"hydra.run.dir={where}", *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return where


@pytest.fixture(scope="module")
def slow_run(cache_dir, tmp_path_factory) -> Path:
    from tests.conftest import agentrl_cli

    where = tmp_path_factory.mktemp("staleness") / "slow"
    result = agentrl_cli(cache_dir, where.parent, "train", *RUN, f"hydra.run.dir={where}", SLOW)
    assert result.returncode == 0, result.stderr[-3000:]
    return where


def test_two_runs_of_one_seed_log_the_same_metrics_with_the_engines_log_probs(slow_run, run_cli, tmp_path):
    expected = records_by_iteration(slow_run)
    assert records_by_iteration(train(run_cli, tmp_path / "fast")) == expected
    assert [expected[i]["async/staleness"] for i in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]
    assert [expected[i]["async/policy_version"] for i in (1, 2, 3, 4)] == [0.0, 0.0, 1.0, 2.0]
    assert all("off_policy/weight_mean" in expected[i] for i in (1, 2, 3, 4))
    assert "eval/success" in expected[2]
    # iteration 1 trains on the engine's rows of version 0, which the trainer still holds: they agree to the
    # engine's precision; iteration 2 on rows of version 0 too, now one update old: the rows kept the log-probs
    # the engine sampled them with, not the current policy's
    assert expected[1]["rollout/vllm_logp_gap_max"] < GAP
    assert expected[2]["rollout/vllm_logp_gap_max"] > 100 * GAP


def test_a_resumed_run_generates_the_checkpoints_jobs_again_to_the_same_rows(slow_run, run_cli, tmp_path):
    resumed = tmp_path / "resumed"
    shutil.copytree(slow_run, resumed, symlinks=True)
    checkpoints = resumed / "checkpoints"
    for later in (2, 3, 4):
        shutil.rmtree(checkpoints / f"checkpoint-{later}")
    (checkpoints / "last").unlink()
    os.symlink("checkpoint-1", checkpoints / "last")
    jobs = torch.load(checkpoints / "checkpoint-1" / ASYNC_ROLLOUTS, weights_only=False)
    assert [(job["iteration"], job["batch"] is None, job["engine"]) for job in jobs] == [(2, True, "vllm")], (
        "iteration 2's job was to be saved before its rows existed: tasks and the engine's weights"
    )

    result = run_cli("train", *RUN, f"hydra.run.dir={resumed}", "trainer.resume=auto")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from" in result.stdout
    assert records_by_iteration(resumed) == records_by_iteration(slow_run)
