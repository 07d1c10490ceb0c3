"""The lockstep collector: row bookkeeping, and an environment fault ends only its own episode."""

from __future__ import annotations

import pytest

from agentrl.envs.household import HouseholdSuite
from agentrl.envs.workers import InlinePool
from agentrl.rollout.batch import summarize
from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.policies import RandomPolicy


class CountingPolicy(RandomPolicy):
    def __init__(self):
        super().__init__(seed=0)
        self.calls = []

    def act(self, turns):
        self.calls.append(len(turns))
        return super().act(turns)


def test_groups_run_in_lockstep_with_one_call_per_turn():
    suite = HouseholdSuite("default")
    tasks = [suite.task("train", i) for i in range(3)]
    policy = CountingPolicy()
    batch = collect(suite, tasks, 4, policy, PromptSpec("compact", 2))
    assert len(batch.episodes) == 12
    assert sum(policy.calls) == len(batch)  # every row came from one batched call
    assert len(policy.calls) <= suite.max_steps
    assert policy.calls == sorted(policy.calls, reverse=True)  # finished episodes leave the batch
    for e in batch.episodes:
        rows = [i for i in range(len(batch)) if batch.episode[i] == e.episode]
        assert [batch.step[i] for i in rows] == list(range(e.length))
        assert {batch.group[i] for i in rows} == {e.group}
        assert all(batch.won[i] == e.won for i in rows)
        assert e.won == (e.ret >= 10)
    assert batch.episodes[0].task_id == batch.episodes[3].task_id != batch.episodes[4].task_id


def test_invalid_reply_is_flagged_and_reaches_the_env():
    class Babble:
        def act(self, turns):
            from agentrl.rollout.collector import Reply

            return [Reply(text="I would like to open the fridge") for _ in turns]

    suite = HouseholdSuite("easy")
    batch = collect(suite, [suite.task("train", 0)], 2, Babble(), PromptSpec("compact", 2), keep_transcripts=True)
    assert not any(batch.valid) and not any(batch.admissible)
    assert batch.episodes[0].transcript[0]["action"] == "I would like to open the fridge"
    assert summarize(batch, "rollout")["rollout/invalid_rate"] == 1.0


def test_a_broken_environment_fails_only_its_episode():
    class Flaky(HouseholdSuite):
        made = 0

        def make_env(self):
            env = super().make_env()
            Flaky.made += 1
            if Flaky.made == 2:  # the second environment breaks on its first step

                def broken(action):
                    raise RuntimeError("engine crashed")

                env.step = broken
            return env

    suite = Flaky("default")
    pool = InlinePool(suite.make_env)
    tasks = [suite.task("train", 0), suite.task("train", 1)]
    batch = collect(suite, tasks, 2, RandomPolicy(1), PromptSpec("compact", 2), pool=pool)
    faults = [e for e in batch.episodes if e.fault]
    assert len(faults) == 1 and "engine crashed" in faults[0].fault and not faults[0].won
    assert all(e.length >= 1 for e in batch.episodes)
    assert summarize(batch, "rollout")["rollout/faults"] == 1.0
    again = collect(suite, tasks, 2, RandomPolicy(1), PromptSpec("compact", 2), pool=pool)
    assert not any(e.fault for e in again.episodes)  # the broken environment was replaced
    assert Flaky.made == 5
    pool.close()


def test_worker_processes_give_the_same_rollout_as_in_process():
    from agentrl.envs.workers import make_pool

    suite = HouseholdSuite("default")
    tasks = [suite.task("train", i) for i in range(3)]
    inline = collect(suite, tasks, 2, RandomPolicy(7), PromptSpec("compact", 2))
    with make_pool(suite.make_env, num_workers=2, timeout_s=30.0) as pool:
        remote = collect(suite, tasks, 2, RandomPolicy(7), PromptSpec("compact", 2), pool=pool)
    assert remote.prompt == inline.prompt and remote.reward == inline.reward and remote.anchor == inline.anchor


def test_row_columns_are_the_batch_fields_but_episodes():
    from dataclasses import fields

    from agentrl.rollout.batch import StepBatch

    assert tuple(f.name for f in fields(StepBatch))[:-1] == StepBatch.ROW_COLUMNS
    assert "episodes" not in StepBatch.ROW_COLUMNS and fields(StepBatch)[-1].name == "episodes"


def test_a_row_missing_a_column_is_refused_and_adds_nothing():
    import pytest

    from agentrl.rollout.batch import StepBatch

    batch = StepBatch()
    row = dict.fromkeys(StepBatch.ROW_COLUMNS, 0)
    batch.append(row)
    del row["anchor"]
    with pytest.raises(ValueError, match="one value for each of"):
        batch.append(row)
    assert {len(getattr(batch, name)) for name in StepBatch.ROW_COLUMNS} == {1}


def team_example() -> dict:
    """docs/environments.md's team wrapper (the block that starts `# example: team.py`), executed."""
    import re

    from tests.conftest import REPO

    text = (REPO / "docs" / "environments.md").read_text()
    (code,) = re.findall(r"```python\n# example: team.py\n(.*?)```", text, re.S)
    namespace: dict = {}
    exec(compile(code, "team.py", "exec"), namespace)
    return namespace


def test_two_agents_in_one_step_take_two_turns_and_rows_name_their_agent():
    inner = HouseholdSuite("easy")
    suite = team_example()["AdvisedSuite"](inner)
    tasks = [suite.task("train", i) for i in range(2)]
    policy = CountingPolicy()
    batch = collect(suite, tasks, 3, policy, PromptSpec("compact", 2), keep_transcripts=True)
    assert sum(policy.calls) == len(batch)  # each turn is one model call
    for e in batch.episodes:
        rows = [i for i in range(len(batch)) if batch.episode[i] == e.episode]
        agents = [batch.agent[i] for i in rows]
        assert agents == ["adviser", "actor"] * (len(rows) // 2) + ["adviser"] * (len(rows) % 2)
        assert all(batch.reward[i] == 0.0 for i in rows if batch.agent[i] == "adviser")  # the world did not move
        assert all(batch.observation[i].startswith(f"You are the {batch.agent[i]}.") for i in rows)
        assert all(batch.observation[i] in batch.prompt[i] for i in rows)  # the role reaches the model
        assert e.won == (e.ret >= 10)
    assert any(e.won for e in batch.episodes) and any(not e.won for e in batch.episodes)
    # the actor saw the adviser's suggestion
    actor_row = batch.agent.index("actor")
    assert "The adviser suggests:" in batch.observation[actor_row]


def test_a_single_agent_environment_labels_its_rows_0():
    suite = HouseholdSuite("easy")
    batch = collect(suite, [suite.task("train", 0)], 2, RandomPolicy(0), PromptSpec("compact", 2))
    assert set(batch.agent) == {"0"} and len(batch.agent) == len(batch)


def test_an_unhashable_anchor_key_is_one_clear_error():
    """A plug-in whose anchor_key is a list breaks the contract: one UserError that names the task, no traceback."""
    from dataclasses import replace

    from agentrl.envs.household import HouseholdSuite
    from agentrl.errors import UserError
    from agentrl.rollout.collector import PromptSpec, collect
    from agentrl.rollout.policies import RandomPolicy

    class ListAnchors(HouseholdSuite):
        def make_env(self):
            env = super().make_env()
            reset = env.reset
            env.reset = lambda task: replace(reset(task), anchor_key=["room", 1])
            return env

    suite = ListAnchors("easy")
    with pytest.raises(
        UserError, match=r"household/easy/train/0 gave an Observation.anchor_key of type list, which cannot be hashed"
    ):
        collect(suite, [suite.task("train", 0)], 1, RandomPolicy(0), PromptSpec("alfworld", 2))
