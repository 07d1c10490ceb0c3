"""`score_rollout` logs the step-credit diagnostics (`credit/*`) for every estimator, over every rank's rows."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

from agentrl.algos.credit_diagnostics import CREDIT_METRICS, CreditRows
from agentrl.algos.replay import ReplayBuffer
from agentrl.config.algo import AlgoConfig
from agentrl.config.values import Estimator, Norm
from agentrl.rollout.batch import StepBatch
from agentrl.train.iteration import gigpo_step_groups, score_rollout, step_credit


def make_batch(episodes: list[tuple[int, list[tuple]]], first_episode: int = 0) -> StepBatch:
    """(group, [(anchor, reward[, agent]) per step]) per episode, every reply valid; the agent defaults to "0"."""
    batch = StepBatch()
    for episode, (group, steps) in enumerate(episodes, start=first_episode):
        won = sum(r for _, r, *_ in steps) > 0
        for step, (anchor, reward, *agent) in enumerate(steps):
            for name, value in (
                ("group", group),
                ("episode", episode),
                ("step", step),
                ("agent", agent[0] if agent else "0"),
                ("task_id", f"task{group}"),
                ("reward", reward),
                ("valid", True),
                ("admissible", True),
                ("anchor", anchor),
                ("observation", anchor),
                ("prompt", "p"),
                ("completion", "c"),
                ("prompt_ids", [1]),
                ("completion_ids", [2]),
                ("logprobs", [-0.5]),
                ("won", won),
                ("replayed", False),
            ):
                getattr(batch, name).append(value)
    return batch


# Group 0: a success and a failure sharing their first state; group 1: two equal failures at one state.
EPISODES = [
    (0, [("s0", 0.0), ("s1", 10.0)]),
    (0, [("s0", 0.0), ("s2", 0.0)]),
    (1, [("t0", 0.0)]),
    (1, [("t0", 0.0)]),
]


def cfg_for(estimator: str, **algo) -> SimpleNamespace:
    # norm none: RLOO's; the same for the three so that their diagnostics agree
    config = replace(AlgoConfig(estimator=Estimator(estimator), norm=Norm.none), **algo)
    return SimpleNamespace(algo=config, env=SimpleNamespace(max_fault_share=1.0))


def credit(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k.startswith("credit/")}


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "rloo"])
def test_every_estimator_logs_what_gigpo_would_have(estimator):
    metrics = score_rollout(cfg_for(estimator), make_batch(EPISODES), None, lambda items: items, 1).metrics
    assert set(credit(metrics)) == {f"credit/{name}" for name in CREDIT_METRICS}
    gigpo_run = score_rollout(cfg_for("gigpo"), make_batch(EPISODES), None, lambda items: items, 1).metrics
    assert credit(metrics) == pytest.approx(credit(gigpo_run))  # a GRPO run shows GiGPO's step groups
    assert metrics["credit/step_group_size_1_share"] == 2 / 6
    assert metrics["credit/step_group_size_2_4_share"] == 4 / 6
    assert metrics["credit/step_advantage_nonzero_share"] == 2 / 6
    assert metrics["credit/episode_groups_no_signal_share"] == 0.5
    assert metrics["credit/step_groups_no_signal_share"] == 0.5
    assert 0 < metrics["credit/episode_step_advantage_correlation"] < 1
    # The existing GiGPO names stay, for GiGPO runs only.
    assert ("gigpo/step_group_singleton_share" in metrics) == (estimator == "gigpo")
    if estimator == "gigpo":
        assert metrics["gigpo/step_group_singleton_share"] == metrics["credit/step_group_size_1_share"]


def test_the_diagnostics_cover_every_rank():
    """With two ranks, the figures are those of both ranks' rows together, not of this rank's."""
    other_rank = make_batch(EPISODES[2:], first_episode=2)
    both_ranks = score_rollout(cfg_for("grpo"), make_batch(EPISODES), None, lambda items: items, 1).metrics
    this_rank = make_batch(EPISODES[:2])

    algo = cfg_for("grpo").algo
    other_rows = step_credit(algo, other_rank, gigpo_step_groups(algo, other_rank))

    def gather(items: list) -> list:  # the other rank's episodes are left out: only the diagnostics are checked
        return items + [other_rows] if items and isinstance(items[0], CreditRows) else items

    metrics = score_rollout(cfg_for("grpo"), this_rank, None, gather, 1).metrics
    assert credit(metrics) == pytest.approx(credit(both_ranks))
    alone = score_rollout(cfg_for("grpo"), this_rank, None, lambda items: items, 1).metrics
    assert alone["credit/episode_groups_no_signal_share"] == 0.0  # group 1 is on the other rank


def test_replay_combination_reads_the_batch_after_injection():
    """GRPO + ARPO: an all-fail group gets a stored success, and the diagnostics see the injected batch."""
    buffer = ReplayBuffer(capacity=8, seed=0)
    buffer.add(make_batch([(1, [("t0", 10.0)])], first_episode=100))
    cfg = cfg_for("grpo", replay={"enabled": True})
    metrics = score_rollout(cfg, make_batch(EPISODES), buffer, lambda items: items, 1).metrics
    assert metrics["replay/groups_injected"] == 1.0
    assert metrics["credit/episode_groups_no_signal_share"] == 0.0  # group 1 now holds a success
    assert metrics["credit/step_groups_no_signal_share"] == 0.0


def test_an_empty_batch_logs_undefined_figures():
    metrics = score_rollout(cfg_for("gigpo"), StepBatch(), None, lambda items: items, 1).metrics
    assert all(math.isnan(v) for v in credit(metrics).values()) and credit(metrics)


# One group played by a team at one state "s": a checker's turns and an actor's; only episode 0 is won.
TEAM = [
    (0, [("s", 0.0, "checker"), ("s", 10.0, "actor")]),
    (0, [("s", 0.0, "checker"), ("s", 0.0, "checker")]),
    (0, [("s", 0.0, "checker"), ("s", 0.0, "actor")]),
]


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "rloo"])
def test_a_teams_diagnostics_keep_its_agents_apart(estimator):
    """Step groups are keyed by (task group, agent, anchor) and A^E takes `algo.norm_scope`, as GiGPO's are."""
    team = score_rollout(cfg_for(estimator, norm_scope="agent"), make_batch(TEAM), None, lambda items: items, 1)
    # The checker's 4 rows and the actor's 2 at "s" are two step groups, not one of 6.
    assert team.metrics["credit/step_group_size_2_4_share"] == 1.0
    assert team.metrics["credit/step_group_size_5_9_share"] == 0.0
    # norm=none, agent scope: the checker's scores [10, 0, 0, 0] and the actor's [10, 0] give |A^E| of
    # [7.5, 2.5, 2.5, 2.5] and [5, 5]; the global scope would give [6.67, 3.33 x 5] (mean 4.44).
    assert team.metrics["credit/episode_advantage_abs_mean"] == pytest.approx(25 / 6)

    one_agent = [(group, [(anchor, reward) for anchor, reward, _ in steps]) for group, steps in TEAM]
    alone = score_rollout(cfg_for(estimator), make_batch(one_agent), None, lambda items: items, 1).metrics
    assert alone["credit/step_group_size_5_9_share"] == 1.0
    assert alone["credit/episode_advantage_abs_mean"] == pytest.approx(40 / 9)
