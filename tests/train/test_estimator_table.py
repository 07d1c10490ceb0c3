"""`iteration.ESTIMATORS`: every `algo.estimator` value has an entry, and each entry calls the estimator it names."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agentrl.algos.gigpo import gigpo
from agentrl.algos.grpo import grpo, rloo
from agentrl.config.algo import AlgoConfig
from agentrl.config.values import Estimator, Norm, NormScope
from agentrl.rollout.batch import StepBatch
from agentrl.train.iteration import ESTIMATORS, compute_advantages, gigpo_step_groups


def test_every_estimator_value_has_an_entry():
    assert set(ESTIMATORS) == set(Estimator)


def _batch() -> StepBatch:
    """Two groups of two episodes, with an invalid reply and a shared anchor, so the three estimators differ."""
    batch = StepBatch()
    rows = [  # group, episode, step, reward, valid, anchor
        (0, 0, 0, 0.0, True, "s0"),
        (0, 0, 1, 10.0, False, "s1"),
        (0, 1, 0, 0.0, True, "s0"),
        (1, 2, 0, 3.0, True, "t0"),
        (1, 3, 0, 0.0, True, "t0"),
        (1, 3, 1, 1.0, True, "t1"),
    ]
    for group, episode, step, reward, valid, anchor in rows:
        batch.group.append(group)
        batch.episode.append(episode)
        batch.step.append(step)
        batch.agent.append("0")
        batch.reward.append(reward)
        batch.valid.append(valid)
        batch.anchor.append(anchor)
    return batch


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "rloo"])
def test_each_entry_calls_its_estimator(estimator):
    algo = AlgoConfig(estimator=Estimator(estimator))
    if estimator == "rloo":
        algo.norm = Norm.none
    batch = _batch()
    columns = (batch.group, batch.episode, batch.step, batch.reward, batch.valid)
    penalty = dict(invalid_penalty=0.1)
    expected = {
        "grpo": lambda: grpo(*columns, norm=algo.norm, **penalty),
        "gigpo": lambda: gigpo(*columns, batch.anchor, gamma=0.95, step_weight=1.0, **penalty),
        "rloo": lambda: rloo(*columns, **penalty),
    }[estimator]()
    others = [compute_advantages(replace(algo, estimator=e), batch) for e in Estimator if e != estimator]
    out = compute_advantages(algo, batch, gigpo_step_groups(algo, batch))
    np.testing.assert_array_equal(out, expected)
    assert all(not np.array_equal(out, other) for other in others)  # the batch tells the three apart


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "rloo"])
def test_the_agent_scope_reads_the_rows_agents(estimator):
    algo = AlgoConfig(estimator=Estimator(estimator))
    if estimator == "rloo":
        algo.norm = Norm.none
    batch = _batch()
    batch.agent = ["checker", "actor", "checker", "checker", "checker", "actor"]
    columns = (batch.group, batch.episode, batch.step, batch.reward, batch.valid)
    scoped = dict(invalid_penalty=0.1, agent=batch.agent, norm_scope="agent")
    expected = {
        "grpo": lambda: grpo(*columns, norm=algo.norm, **scoped),
        "gigpo": lambda: gigpo(*columns, batch.anchor, gamma=0.95, step_weight=1.0, **scoped),
        "rloo": lambda: rloo(*columns, **scoped),
    }[estimator]()
    agent_scope = replace(algo, norm_scope=NormScope.agent)
    out = compute_advantages(agent_scope, batch, gigpo_step_groups(agent_scope, batch))
    np.testing.assert_array_equal(out, expected)
    assert not np.array_equal(out, compute_advantages(algo, batch, gigpo_step_groups(algo, batch)))


def test_a_team_logs_each_agents_mean_advantage_and_one_agent_logs_nothing():
    from agentrl.train.iteration import agent_advantage_metrics

    advantages = np.array([1.0, 3.0, -2.0, 0.5])
    assert agent_advantage_metrics(["0"] * 4, advantages) == {}
    metrics = agent_advantage_metrics(["b", "a", "b", "b"], advantages)
    assert metrics == {
        "rollout/agent/a/advantage_mean": 3.0,
        "rollout/agent/a/row_share": 0.25,
        "rollout/agent/b/advantage_mean": -0.5 / 3,
        "rollout/agent/b/row_share": 0.75,
    }


def test_the_agent_scope_without_a_team_is_said_once(monkeypatch, caplog):
    from agentrl.train import iteration

    monkeypatch.setattr(iteration, "_warned_single_agent", False)
    agent, global_ = AlgoConfig(norm_scope=NormScope.agent), AlgoConfig(norm_scope=NormScope["global"])
    assert not iteration.warn_agent_scope_without_team(global_, ["0"] * 3)
    assert not iteration.warn_agent_scope_without_team(agent, ["a", "b"])  # a team: nothing to say
    with caplog.at_level("WARNING", logger="agentrl.train.iteration"):
        assert iteration.warn_agent_scope_without_team(agent, ["0"] * 3)
        assert not iteration.warn_agent_scope_without_team(agent, ["0"] * 3)  # once
    assert [r.message for r in caplog.records if "is the global one" in r.message]
