"""ARPO replay: what is stored, when it is injected, and that the buffer survives a checkpoint."""

from __future__ import annotations

import json

import pytest

from agentrl.algos.replay import ReplayBuffer, ReplayRule, all_fail_groups
from agentrl.rollout.batch import StepBatch


def make_batch(groups: dict[int, tuple[str, list[list[float]]]], first_episode: int = 0) -> StepBatch:
    """groups: group id -> (task id, one reward list per episode). Episode ids count up from first_episode."""
    batch = StepBatch()
    episode = first_episode
    for group, (task, episodes) in groups.items():
        for rewards in episodes:
            for step, reward in enumerate(rewards):
                for name, value in (
                    ("group", group),
                    ("episode", episode),
                    ("step", step),
                    ("agent", "0"),
                    ("task_id", task),
                    ("reward", reward),
                    ("valid", True),
                    ("admissible", True),
                    ("anchor", f"{task}/s{step}"),
                    ("observation", f"obs {step}"),
                    ("prompt", f"p{episode}.{step}"),
                    ("completion", f"c{episode}.{step}"),
                    ("prompt_ids", [1, 2]),
                    ("completion_ids", [3]),
                    ("logprobs", [-0.5]),
                    ("won", sum(rewards) > 0),
                    ("replayed", False),
                ):
                    getattr(batch, name).append(value)
            episode += 1
    return batch


WIN, FAIL = [0.0, 10.0], [0.0, 0.0, 0.0]


def test_all_fail_rule_uses_population_std_and_mean():
    rule = ReplayRule()
    batch = make_batch(
        {0: ("a", [FAIL, FAIL]), 1: ("b", [WIN, FAIL]), 2: ("c", [[0.5], [0.5]]), 3: ("d", [[3.0], [3.0]])}
    )
    # group 2: scores 0.05, 0.05 -> std 0, mean 0.05 < 0.2: all-fail; group 3: mean 0.3 -> not.
    assert all_fail_groups(batch, rule) == [0, 2]


def test_successes_are_stored_and_failures_are_not():
    buffer = ReplayBuffer(capacity=8)
    assert buffer.add(make_batch({0: ("a", [WIN, FAIL, WIN]), 1: ("b", [FAIL, FAIL])})) == 2
    assert len(buffer) == 2 and set(buffer.store) == {"a"}
    stored = buffer.store["a"][0]
    assert stored["reward"] == WIN and stored["step"] == [0, 1]


def test_success_threshold_is_relative_to_max_return():
    buffer = ReplayBuffer(rule=ReplayRule(max_return=10.0, success_threshold=0.1))
    assert buffer.add(make_batch({0: ("a", [[1.0], [1.5]])})) == 1  # 0.1 is not above 0.1; 0.15 is


def test_fifo_capacity_drops_the_oldest():
    buffer = ReplayBuffer(capacity=2)
    for k in range(3):
        batch = make_batch({0: ("a", [WIN])}, first_episode=10 * k)
        buffer.add(batch)
    assert [rows["episode"][0] for rows in buffer.store["a"]] == [10, 20]


def test_injection_replaces_the_first_episode_of_an_all_fail_group_only():
    buffer = ReplayBuffer(capacity=4, seed=0)
    buffer.add(make_batch({0: ("a", [WIN])}, first_episode=100))
    batch = make_batch({0: ("a", [FAIL, FAIL, FAIL]), 1: ("b", [FAIL, FAIL]), 2: ("a", [WIN, FAIL])})
    out = buffer.inject(batch)
    assert buffer.last_injected == 1  # group 1 has no stored success (task b), group 2 is not all-fail
    episodes = sorted(set(zip(out.group, out.episode)))
    assert episodes == sorted(set(zip(batch.group, batch.episode)))  # group sizes stay N, ids are reused
    replayed = [i for i in range(len(out)) if out.replayed[i]]
    assert {out.episode[i] for i in replayed} == {0} and {out.group[i] for i in replayed} == {0}
    assert [out.reward[i] for i in replayed] == WIN and all(out.won[i] for i in replayed)
    assert len(out) == len(batch) - len(FAIL) + len(WIN)
    assert out.episodes == batch.episodes  # the rollout's own episode results are untouched


def test_replayed_copies_are_not_stored_again():
    buffer = ReplayBuffer(capacity=4)
    buffer.add(make_batch({0: ("a", [WIN])}))
    out = buffer.inject(make_batch({0: ("a", [FAIL, FAIL])}))
    assert buffer.add(out) == 0 and len(buffer) == 1


def test_apply_stores_the_episode_an_injection_replaced():
    # Returns 1.5, 1.5 with max_return 10: scores 0.15, 0.15, std 0 < 0.05 and mean 0.15 < 0.2, so
    # the group is all-fail, yet each episode is above success_threshold 0.1 and is a success.
    buffer = ReplayBuffer(capacity=8, seed=0)
    buffer.add(make_batch({0: ("a", [WIN])}, first_episode=100))
    batch = make_batch({0: ("a", [[1.5], [1.5]])})
    out = buffer.apply(batch)
    assert buffer.last_injected == 1 and buffer.last_added == 2
    assert [out.replayed[i] for i in range(len(out)) if out.episode[i] == 0] == [True, True]  # episode 0 replaced
    stored = [(rows["episode"][0], rows["reward"], rows["replayed"][0]) for rows in buffer.store["a"]]
    assert stored == [(100, WIN, False), (0, [1.5], False), (1, [1.5], False)]  # the replaced original too


def test_apply_draws_before_it_stores():
    # As the reference's apply_replay: an all-fail group draws from earlier iterations' successes only.
    buffer = ReplayBuffer(capacity=8, seed=0)
    batch = make_batch({0: ("a", [[1.5], [1.5]])})
    assert buffer.apply(batch) is batch and buffer.last_injected == 0
    assert len(buffer) == 2
    out = buffer.apply(make_batch({0: ("a", [[1.5], [1.5]])}, first_episode=10))
    assert buffer.last_injected == 1 and len(buffer) == 4
    assert dict(zip(out.episode, out.replayed)) == {10: True, 11: False}  # a copy of episode 0 or 1


def test_score_rollout_stores_the_original_batch():
    from types import SimpleNamespace

    from agentrl.config.algo import AlgoConfig
    from agentrl.train.iteration import score_rollout

    cfg = SimpleNamespace(algo=AlgoConfig(), env=SimpleNamespace(max_fault_share=1.0))
    buffer = ReplayBuffer(capacity=8, seed=0)
    buffer.add(make_batch({0: ("a", [WIN])}, first_episode=100))
    scored = score_rollout(cfg, make_batch({0: ("a", [[1.5], [1.5]])}), buffer, lambda items: items, 0)
    out = scored.batch
    assert {out.episode[i] for i in range(len(out)) if out.replayed[i]} == {0}
    assert scored.metrics["replay/groups_injected"] == 1.0
    assert scored.metrics["replay/episodes_added"] == 2.0
    assert [rows["episode"][0] for rows in buffer.store["a"]] == [100, 0, 1]


def test_nothing_happens_without_stored_successes():
    buffer = ReplayBuffer()
    batch = make_batch({0: ("a", [FAIL, FAIL])})
    assert buffer.inject(batch) is batch and buffer.last_injected == 0


def test_state_dict_round_trip_through_json_keeps_the_draws():
    a = ReplayBuffer(capacity=3, seed=5)
    a.add(make_batch({0: ("a", [WIN, WIN, [10.0]])}))
    restored = ReplayBuffer(capacity=3, seed=99)
    restored.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert list(restored.store["a"]) == list(a.store["a"])
    for k in range(5):
        batch = make_batch({0: ("a", [FAIL, FAIL])}, first_episode=50 + k)
        assert a.inject(batch).rows(range(2)) == restored.inject(batch).rows(range(2))


def test_tuple_anchors_survive_json():
    a = ReplayBuffer()
    batch = make_batch({0: ("a", [WIN])})
    batch.anchor = [("room", 1), ("room", 2)]
    a.add(batch)
    b = ReplayBuffer()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.store["a"][0]["anchor"] == [("room", 1), ("room", 2)]


def test_capacity_mismatch_is_a_clear_error():
    state = ReplayBuffer(capacity=2).state_dict()
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(capacity=8).load_state_dict(state)
