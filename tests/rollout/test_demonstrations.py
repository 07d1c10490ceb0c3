"""Demonstrations through the collector: the expert's (prompt, reply) pairs on the built-in household world."""

from __future__ import annotations

import pytest

from agentrl.config.envs import HouseholdEnvConfig
from agentrl.envs.base import has_expert
from agentrl.envs.household import HouseholdSuite, solve
from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.demonstrations import ExpertPolicy, play, won_pairs
from agentrl.rollout.parsing import format_reply, parse_action
from agentrl.rollout.policies import RandomPolicy


def _env_cfg(**overrides):
    return HouseholdEnvConfig(level="easy", prompt_template="compact", **overrides)


def test_the_household_expert_wins_every_task_with_admissible_well_formed_replies():
    suite = HouseholdSuite(level="easy")
    assert has_expert(suite)
    tasks = [suite.task("train", i) for i in range(12)]
    batch = play(suite, _env_cfg(), ExpertPolicy(suite), tasks, "test")
    assert all(e.won for e in batch.episodes)
    assert all(batch.admissible) and all(batch.valid)
    # each reply is exactly the format RL parses, and carries the plan's action for that turn
    for reply, task_id, step in zip(batch.completion, batch.task_id, batch.step):
        task = next(t for t in tasks if t.task_id == task_id)
        assert reply == format_reply(solve(task)[step])
        assert parse_action(reply).action == solve(task)[step]
    # an episode lasts exactly its plan
    assert [e.length for e in batch.episodes] == [len(solve(t)) for t in tasks]
    assert len(won_pairs(batch)) == len(batch)


def test_expert_prompts_are_rls_prompts():
    """The expert's prompts are the collector's own: a random policy on the same task sees the same first prompt."""
    suite = HouseholdSuite(level="easy")
    task = suite.task("train", 3)
    spec = PromptSpec("compact", 2)
    expert = collect(suite, [task], 1, ExpertPolicy(suite), spec)
    random = collect(suite, [task], 1, RandomPolicy(0), spec)
    assert expert.prompt[0] == random.prompt[0]
    # and the second prompt holds the expert's first action in its history window
    assert solve(task)[0] in expert.prompt[1]


def test_episodes_the_plan_does_not_win_are_dropped():
    suite = HouseholdSuite(level="easy")

    class Clipped:  # a suite whose expert forgets the last action of every plan
        def __getattr__(self, name):
            return getattr(suite, name)

        def expert_plan(self, task):
            return solve(task)[:-1]

    tasks = [suite.task("train", i) for i in range(3)]
    batch = play(suite, _env_cfg(), ExpertPolicy(Clipped()), tasks, "test")
    assert not any(e.won for e in batch.episodes)
    assert won_pairs(batch) == []
    assert "<action>look</action>" in batch.completion  # past the plan's end


def test_a_turn_without_its_task_is_refused():
    from agentrl.rollout.collector import Turn

    suite = HouseholdSuite(level="easy")
    obs = suite.make_env().reset(suite.task("train", 0))
    with pytest.raises(ValueError, match="name its task"):
        ExpertPolicy(suite).act([Turn(prompt="p", observation=obs)])


def test_a_play_on_a_broken_environment_stops_instead_of_returning_part_of_its_data():
    """The tiny model's build and agentrl sft play through `play`: more than env.max_fault_share of the episodes
    faulting stops it with one line, as it stops a training iteration."""
    from agentrl.envs.faults import FaultySuite
    from agentrl.errors import UserError

    env_cfg = HouseholdEnvConfig(level="easy", max_fault_share=0.5)
    suite = FaultySuite(HouseholdSuite(level="easy"), 0.95)
    tasks = [suite.task("train", i) for i in range(20)]
    with pytest.raises(UserError) as err:
        play(suite, env_cfg, RandomPolicy(0), tasks, "playing demonstrations")
    message = str(err.value)
    assert "\n" not in message
    assert "of the episodes in playing demonstrations (env=household)" in message
    assert "limit env.max_fault_share=0.5" in message
