"""env=household_team: a checker, then an actor or a finisher; checker turns leave the world as it was."""

from __future__ import annotations

import pytest

from agentrl.config.envs import HouseholdTeamEnvConfig
from agentrl.envs.household import HouseholdSuite, solve
from agentrl.envs.household_team import HouseholdTeamSuite
from agentrl.envs.registry import make_suite
from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.policies import RandomPolicy


@pytest.fixture
def suite():
    return HouseholdTeamSuite("easy")


def test_the_suite_is_householders_tasks_with_twice_the_turns(suite):
    household = HouseholdSuite("easy")
    assert suite.task("train", 3) == household.task("train", 3)
    assert suite.max_steps == 2 * household.max_steps
    assert HouseholdTeamSuite("easy", max_steps=7).max_steps == 7
    assert isinstance(make_suite(HouseholdTeamEnvConfig(level="easy")), HouseholdTeamSuite)


def test_checker_then_actor_then_a_finisher_who_completes_the_goal_wins(suite):
    task = suite.task("train", 0)
    plan = solve(task)
    env = suite.make_env()
    obs = env.reset(task)
    for action in plan[:-1]:
        assert obs.agent == "checker" and obs.admissible_actions == ["continue", "finish"]
        assert obs.text.startswith("You are the checker.")
        state = env.world.state
        step = env.step("continue")
        assert env.world.state == state and step.reward == 0.0 and not step.done  # the world did not move
        assert step.observation.agent == "actor" and action in step.observation.admissible_actions
        step = env.step(action)
        assert step.action_valid and not step.done
        obs = step.observation
    step = env.step("finish")
    assert step.observation.agent == "finisher" and step.observation.text.startswith("You are the finisher.")
    step = env.step(plan[-1])
    assert step.won and step.done and step.reward == 10.0


def test_a_finisher_whose_action_does_not_complete_the_goal_fails_the_episode(suite):
    task = suite.task("train", 0)
    assert len(solve(task)) > 1  # so no first action completes the goal
    env = suite.make_env()
    env.reset(task)
    finisher = env.step("finish").observation
    step = env.step(finisher.admissible_actions[0])
    assert step.action_valid and step.done and not step.won and step.reward == 0.0


def test_a_checker_reply_that_is_no_answer_is_invalid_and_leaves_the_turn_with_the_checker(suite):
    env = suite.make_env()
    env.reset(suite.task("train", 1))
    step = env.step("go to fridge 1")
    assert not step.action_valid and step.observation.agent == "checker" and "Nothing happens." in step.observation.text


def test_the_turn_limit_ends_the_episode():
    suite = HouseholdTeamSuite("easy", max_steps=3)
    env = suite.make_env()
    env.reset(suite.task("train", 2))
    assert not env.step("continue").done
    actor = env.step("look")
    assert not actor.done
    assert env.step("continue").done


def test_rollouts_label_each_row_with_its_role(suite):
    batch = collect(suite, [suite.task("train", i) for i in range(3)], 4, RandomPolicy(0), PromptSpec("alfworld", 2))
    assert set(batch.agent) == {"checker", "actor", "finisher"}
    for e in batch.episodes:
        agents = [a for a, ep in zip(batch.agent, batch.episode) if ep == e.episode]
        assert agents[0] == "checker"
        assert all(a == "checker" or prev == "checker" for prev, a in zip(agents, agents[1:]))  # after a checker
    rows = range(len(batch))
    assert all(batch.prompt[i].count(f"You are the {batch.agent[i]}.") >= 1 for i in rows)


def test_rollout_and_eval_figures_break_down_by_agent(suite):
    """summarize gives each role's success (of the episodes it acted in), invalid rate and share of turns, as
    counted from the rows by hand."""
    from agentrl.rollout.batch import summarize
    from agentrl.rollout.collector import Reply

    class SometimesGarbage:  # random admissible actions, but every third reply is no action at all
        def __init__(self):
            self.random, self.replies = RandomPolicy(1), 0

        def act(self, turns):
            replies = self.random.act(turns)
            for i in range(len(replies)):
                self.replies += 1
                if self.replies % 3 == 0:
                    replies[i] = Reply("hmm")
            return replies

    tasks = [suite.task("train", i) for i in range(4)]
    batch = collect(suite, tasks, 4, SometimesGarbage(), PromptSpec("alfworld", 2))
    metrics = summarize(batch, "eval")
    assert 0 < metrics["eval/agent/checker/invalid_rate"] < 1
    won = {e.episode: e.won for e in batch.episodes}
    for agent in ("checker", "actor", "finisher"):
        mine = [i for i, a in enumerate(batch.agent) if a == agent]
        episodes = {batch.episode[i] for i in mine}
        assert metrics[f"eval/agent/{agent}/success"] == pytest.approx(sum(won[e] for e in episodes) / len(episodes))
        invalid = sum(not batch.valid[i] for i in mine) / len(mine)
        assert metrics[f"eval/agent/{agent}/invalid_rate"] == pytest.approx(invalid)
        assert metrics[f"eval/agent/{agent}/turn_share"] == pytest.approx(len(mine) / len(batch))
    # the checker acts in every episode: its success is the team's
    assert metrics["eval/agent/checker/success"] == pytest.approx(metrics["eval/success"])


def test_a_single_agent_has_no_breakdown():
    from agentrl.rollout.batch import summarize

    single = HouseholdSuite("easy")
    batch = collect(single, [single.task("train", 0)], 2, RandomPolicy(0), PromptSpec("alfworld", 2))
    assert not any("/agent/" in key for key in summarize(batch, "eval"))


def test_the_expert_wins_every_task_through_the_finisher(suite):
    from agentrl.envs.base import has_expert
    from agentrl.rollout.demonstrations import ExpertPolicy

    assert has_expert(suite)
    tasks = [suite.task("train", i) for i in range(6)]
    batch = collect(suite, tasks, 1, ExpertPolicy(suite), PromptSpec("alfworld", 2), keep_transcripts=True)
    assert all(e.won for e in batch.episodes)
    for e in batch.episodes:  # checker, then actor ..., and the finisher takes the last action
        agents = [t["agent"] for t in e.transcript]
        assert agents[::2] == ["checker"] * (len(agents) // 2) and agents[-1] == "finisher"
        assert set(agents[1:-1:2]) <= {"actor"}
