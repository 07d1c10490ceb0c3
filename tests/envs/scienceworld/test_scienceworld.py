"""env=scienceworld on the real engine: splits, success and reward, the anchor, the prompt, faults, the CLI."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from agentrl.config.envs import ScienceworldEnvConfig
from agentrl.envs.registry import make_suite
from agentrl.envs.scienceworld.adapter import EPO_EXCLUDED, SPLITS, variation_table
from agentrl.envs.workers import EnvFault, make_pool
from agentrl.rollout.prompts import build_prompt
from tests.envs.scienceworld.conftest import own_jvms

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("scienceworld_engine")]  # skips without extra or Java

TASK = "find-living-thing"  # short gold paths


def suite_of(**overrides):
    return make_suite(ScienceworldEnvConfig(**overrides))


@pytest.fixture(scope="module")
def suite():
    return suite_of()


def test_splits_are_the_engines_train_dev_test_variations(suite):
    table = variation_table()
    assert len(table) == 30 and set(EPO_EXCLUDED) <= set(table)
    assert suite.task_types == tuple(name for name in table if name not in EPO_EXCLUDED)
    for split, key in SPLITS.items():
        pairs = {(t.task_type, t.payload["variation"]) for t in map(lambda i: suite.task(split, i), range(200))}
        assert all(v in table[name][key] for name, v in pairs)
        assert suite.split_size(split) == sum(len(table[name][key]) for name in suite.task_types)
    for name in suite.task_types:  # disjoint variations
        train, dev, test = (set(table[name][k]) for k in ("train", "dev", "test"))
        assert not (train & dev or train & test or dev & test)
    # the sizes of EPO's index files: L0 train, L0 test (dev variations), L1 test (test variations)
    assert [suite.split_size(split) for split in SPLITS] == [3322, 1661, 1684]
    # the first 29 tasks of an eval split are one of each task type
    first = [suite.task("eval_in_distribution", i).task_type for i in range(len(suite.task_types))]
    assert sorted(first) == sorted(suite.task_types)
    assert suite.task("train", 5) == suite.task("train", 5)


def test_gold_path_wins_with_reward_10_and_the_prompt_summarises_the_actions(suite):
    task = next(suite.task("train", i) for i in range(60) if suite.task("train", i).task_type == TASK)
    env = suite.make_env()
    try:
        gold = env.gold_path(task)
        obs = env.reset(task)
        assert "living thing" in obs.task_description
        assert len(obs.admissible_actions) > 20 and "look around" in obs.admissible_actions
        assert obs.actions_text.startswith("Valid_actions: [") and "OBJ needs to be replaced" in obs.actions_text
        prompt = build_prompt(
            "scienceworld",
            task=obs.task_description,
            observation=obs.text,
            admissible=obs.admissible_actions,
            history=[],
            step=0,
            history_length=2,
            actions_text=obs.actions_text,
        )
        assert "ScienceWorld environment" in prompt and obs.actions_text in prompt
        moves = [a for a in obs.admissible_actions if a.startswith("move ")]  # commands with two objects
        assert moves and not any(move in prompt for move in moves)  # the summary, not every command
        rewards, step = [], None
        for action in gold:
            step = env.step(action)
            rewards.append(step.reward)
            if step.done:
                break
        assert step is not None and step.won and step.done and rewards[-1] == 10.0 and sum(rewards) == 10.0
    finally:
        env.close()


def test_a_wrong_focus_fails_the_episode(suite):
    task = next(suite.task("train", i) for i in range(60) if suite.task("train", i).task_type == TASK)
    env = suite.make_env()
    try:
        obs = env.reset(task)
        wrong = next(a for a in obs.admissible_actions if a.startswith("focus on") and "door" in a)
        step = env.step(wrong)
        assert step.done and not step.won and step.reward == 0.0 and step.action_valid
        with pytest.raises(RuntimeError):
            env.step("look around")  # the episode is over
    finally:
        env.close()


def test_the_anchor_is_the_state(suite):
    task = suite.task("train", 0)
    env = suite.make_env()
    try:
        obs = env.reset(task)
        first = obs.anchor()
        assert isinstance(first, str) and first != obs.text
        assert env.reset(task).anchor() == first  # the same task, the same state
        assert env.step("look around").observation.anchor() == first  # looking changes nothing in the world
        going = next(a for a in obs.admissible_actions if a.startswith("go to "))
        assert env.step(going).observation.anchor() != first  # the agent moved
    finally:
        env.close()
    observed = suite_of(anchor="observation").make_env()
    try:
        obs = observed.reset(task)
        assert obs.anchor() == obs.text
    finally:
        observed.close()


def test_a_killed_jvm_ends_the_episode_as_a_fault_and_the_run_goes_on(suite):
    """Kill the worker's JVM mid-episode: that step is a fault; the slot's next reset starts a fresh JVM."""
    task = suite.task("train", 3)
    with make_pool(suite.make_env, 1, timeout_s=60.0) as pool:
        [obs] = pool.reset([(0, task)])
        [step] = pool.step([(0, "look around")])
        assert not isinstance(step, EnvFault)
        [jvm] = own_jvms()
        assert "-Xmx512m" in Path(f"/proc/{jvm}/cmdline").read_bytes().decode().split("\0")  # env.java_options
        os.kill(jvm, signal.SIGKILL)
        [fault] = pool.step([(0, "look around")])
        assert isinstance(fault, EnvFault) and pool.faults == 1
        [obs] = pool.reset([(0, task)])
        assert not isinstance(obs, EnvFault) and obs.text
        [step] = pool.step([(0, "look around")])
        assert not isinstance(step, EnvFault)
        assert own_jvms() and jvm not in own_jvms()


def test_a_hung_jvm_times_out_and_the_worker_is_replaced(suite):
    task = suite.task("train", 4)
    with make_pool(suite.make_env, 1, timeout_s=5.0) as pool:
        pool.reset([(0, task)])
        [jvm] = own_jvms()
        os.kill(jvm, signal.SIGSTOP)
        try:
            started = time.monotonic()
            [fault] = pool.step([(0, "look around")])
            assert isinstance(fault, EnvFault) and "timeout" in fault.message
            assert time.monotonic() - started < 30
        finally:
            try:
                os.kill(jvm, signal.SIGKILL)
            except ProcessLookupError:
                pass
        [obs] = pool.reset([(0, task)])
        assert not isinstance(obs, EnvFault)


def test_a_killed_jvm_in_process_is_a_fault_too(suite):
    with make_pool(suite.make_env, 0) as pool:
        pool.reset([(0, suite.task("train", 1))])
        [jvm] = own_jvms()
        os.kill(jvm, signal.SIGKILL)
        [fault] = pool.step([(0, "look around")])
        assert isinstance(fault, EnvFault)
        [obs] = pool.reset([(0, suite.task("train", 1))])
        assert not isinstance(obs, EnvFault)


def test_train_and_eval_through_the_cli(run_cli, tmp_path):
    """The issue's two commands: `agentrl train env=scienceworld +debug=fast` (shortened) and
    `agentrl eval --random env=scienceworld`, in worker processes."""
    run_dir = tmp_path / "sw"
    result = run_cli(
        "train",
        "env=scienceworld",
        "+debug=fast",
        "+algo=gigpo",
        "env.num_workers=2",
        "env.max_steps=5",
        "model.tiny.demo_turns=100",  # 20 episodes of 5 steps: played 16, then 4 (max_live_episodes)
        "trainer.iterations=1",
        "eval.num_tasks=2",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] == 1 and records[-1]["rollout/rows"] >= 4
    # the state anchor: a group's episodes start from the same state
    assert records[-1]["gigpo/step_group_singleton_share"] < 1.0

    evaluated = run_cli(
        "eval",
        "--random",
        "env=scienceworld",
        "env.num_workers=2",
        "eval.num_tasks=4",
        f"hydra.run.dir={tmp_path / 'random'}",
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    metrics = json.loads((tmp_path / "random" / "eval.json").read_text())["metrics"]
    first = suite_of().task_types[:4]  # the first 4 tasks of the split: one of each of the first 4 task types
    assert all(f"eval/{name}/success" in metrics for name in first), sorted(metrics)


def test_the_gold_path_expert_wins_through_the_collector_with_admissible_replies():
    """`agentrl sft`'s ScienceWorld expert: the engine's gold path, played through RL's prompts."""
    from agentrl.rollout.demonstrations import ExpertPolicy, play, won_pairs
    from agentrl.rollout.parsing import parse_action

    env_cfg = ScienceworldEnvConfig(tasks=[TASK])
    suite = make_suite(env_cfg)
    tasks = [suite.task("train", i) for i in range(2)]
    batch = play(suite, env_cfg, ExpertPolicy(suite), tasks, "test")
    assert all(e.won for e in batch.episodes)
    # every reply parses, and the engine took every action (no invalid step). Not `batch.admissible`: that is
    # membership in the engine's listed valid actions, which leaves out gold-path actions it accepts (measured:
    # several of the 22 turns here, in episodes that were won)
    assert all(parse_action(reply).valid for reply in batch.completion)
    assert all(e.invalid == 0 for e in batch.episodes)
    assert len(won_pairs(batch)) == len(batch)
