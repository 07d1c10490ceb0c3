"""Mini-batches end to end, through the CLI: with every part that touches the update.

- With `trainer.mini_batch_size=null` an iteration is one step: the ratio is 1, nothing is clipped.
- With it, an iteration takes several steps, the policy moves between them and the clip binds.
- EPO's history advances once per iteration, not once per step.
- ARPO's replayed rows and LoRA's adapter train through several steps too.
(DDP: tests/train/test_ddp.py; exact resume: tests/train/test_resume.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.checkpoints import agentrl_state_file
from tests.conftest import agentrl_cli

pytestmark = pytest.mark.slow

COMMON = ["+debug=fast", "trainer.iterations=3", "trainer.eval_every=0", "trainer.save_every=3", "logger=none"]


def _train(cache_dir, tmp_path: Path, *extra: str) -> list[dict]:
    run_dir = tmp_path / "run"
    result = agentrl_cli(cache_dir, tmp_path, "train", *COMMON, *extra, f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_without_mini_batches_an_iteration_is_one_step(cache_dir, tmp_path):
    records = _train(cache_dir, tmp_path, "trainer.mini_batch_size=null")
    assert [r["train/optimizer_steps"] for r in records] == [1.0, 1.0, 1.0]
    assert all(r["train/clip_ratio"] == 0.0 and r["train/ppo_kl"] == 0.0 for r in records)


def test_mini_batches_take_several_steps_and_the_clip_binds(cache_dir, tmp_path):
    records = _train(cache_dir, tmp_path, "trainer.mini_batch_size=4", "trainer.epochs=2")
    for r in records:
        # 2 epochs over ceil(rows / 4) mini-batches
        assert r["train/optimizer_steps"] == 2 * -(-r["rollout/rows"] // 4)
    assert any(r["train/clip_ratio"] > 0 for r in records)
    assert any(r["train/ppo_kl"] != 0 for r in records)


def test_epo_history_advances_once_per_iteration(cache_dir, tmp_path):
    records = _train(cache_dir, tmp_path, "+algo=epo", "trainer.mini_batch_size=4")
    assert all(r["train/optimizer_steps"] > 1 for r in records)
    state = json.loads(agentrl_state_file(tmp_path / "run" / "checkpoints" / "last").read_text())
    assert len(state["entropy"]["history"]) == 3


def test_arpo_replayed_rows_train_in_mini_batches(cache_dir, tmp_path):
    records = _train(
        cache_dir,
        tmp_path,
        "+algo=arpo",
        "trainer.task_pool=2",
        "trainer.iterations=6",
        "trainer.save_every=6",
        # the debug model wins nothing: every group is all-fail, and with this threshold every episode is
        # stored too, so the buffer fills and injects from the second visit of a task on
        "algo.replay.success_threshold=-1",
        "trainer.mini_batch_size=4",
    )
    assert any(r.get("replay/groups_injected", 0) > 0 for r in records)
    assert all(r["train/optimizer_steps"] > 1 for r in records)


def test_lora_trains_in_mini_batches(cache_dir, tmp_path):
    records = _train(cache_dir, tmp_path, "model.lora.enabled=true", "model.lora.rank=4", "trainer.mini_batch_size=4")
    assert all(r["train/optimizer_steps"] > 1 for r in records)
    assert any(r["train/ppo_kl"] != 0 for r in records)


def test_the_learning_rate_follows_its_schedule(cache_dir, tmp_path):
    """One scheduler step per iteration: constant keeps trainer.learning_rate, cosine falls towards 0 at the last."""
    constant = _train(cache_dir, tmp_path, "trainer.learning_rate=1e-3")
    assert [r["train/learning_rate"] for r in constant] == pytest.approx([1e-3] * 3)
    cosine = _train(
        cache_dir, tmp_path, "trainer.learning_rate=1e-3", "trainer.lr_schedule=cosine", "trainer.overwrite=true"
    )
    rates = [r["train/learning_rate"] for r in cosine]
    # the rate each iteration's update ran at: transformers' cosine at steps 0, 1, 2 of 3, lr * (1 + cos(pi * k / 3)) / 2
    assert rates == pytest.approx([1e-3, 7.5e-4, 2.5e-4], rel=1e-9)
