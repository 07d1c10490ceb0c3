"""Evaluation summaries: per task type, pass@k, and the split checks."""

from __future__ import annotations

import pytest

from agentrl.envs.household import HouseholdSuite
from agentrl.errors import UserError
from agentrl.evaluation.held_out import evaluation_tasks
from agentrl.rollout.batch import EpisodeResult, StepBatch, summarize


def _batch(results):
    batch = StepBatch()
    for i, (task_id, task_type, won, length, invalid) in enumerate(results):
        batch.episodes.append(
            EpisodeResult(i, i, task_id, task_type, won=won, ret=10.0 * won, length=length, invalid=invalid)
        )
    return batch


def test_summary_per_task_type_and_pass_at_k():
    batch = _batch(
        [
            ("t1", "pick_and_place", True, 4, 0),
            ("t1", "pick_and_place", False, 10, 2),
            ("t2", "pick_heat_then_place", False, 10, 0),
            ("t2", "pick_heat_then_place", False, 10, 0),
        ]
    )
    m = summarize(batch, "eval")
    assert m["eval/success"] == 0.25
    assert m["eval/pick_and_place/success"] == 0.5 and m["eval/pick_heat_then_place/success"] == 0.0
    assert m["eval/pass@2"] == 0.5  # t1 solved at least once in 2, t2 never
    assert m["eval/return"] == 2.5 and m["eval/episode_length"] == 8.5
    assert m["eval/invalid_rate"] == pytest.approx(2 / 34)


def test_no_pass_at_k_for_one_episode_per_task():
    assert "eval/pass@1" not in summarize(_batch([("t1", "x", True, 1, 0), ("t2", "x", False, 3, 0)]), "eval")


def test_evaluation_tasks_are_fixed_and_the_split_is_checked():
    suite = HouseholdSuite("default")
    assert [t.task_id for t in evaluation_tasks(suite, "valid", 5)] == [
        t.task_id for t in evaluation_tasks(suite, "valid", 5)
    ]
    with pytest.raises(UserError, match="eval.split='test' does not exist for env=household; available: train, valid"):
        evaluation_tasks(suite, "test", 5)
