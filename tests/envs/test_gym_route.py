"""env=gym: a Gymnasium-style text environment from a factory becomes a task suite (agentrl/envs/gym_text.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agentrl.config.envs import GymEnvConfig
from agentrl.envs.base import Observation, Step, Task
from agentrl.envs.gym_text import build
from agentrl.envs.workers import EnvFault, InlinePool
from agentrl.errors import UserError
from agentrl.evaluation.held_out import evaluation_tasks
from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.policies import RandomPolicy
from agentrl.train.sampler import TaskSampler

REPO = Path(__file__).resolve().parents[2]


def env_cfg(factory: str = "tests.envs.toy_gym:make_corridor", **overrides):
    return OmegaConf.merge(OmegaConf.structured(GymEnvConfig), {"factory": factory, **overrides})


def test_tasks_are_seeds_in_disjoint_splits_and_indices_fold_into_them():
    suite = build(env_cfg(train_seeds=100, eval_seeds=10, seed_base=5))
    assert suite.splits == ("train", "eval_in_distribution")
    train = {suite.task("train", i).seed for i in range(100)}
    held_out = {suite.task("eval_in_distribution", i).seed for i in range(10)}
    assert train == set(range(5, 105)) and held_out == set(range(105, 115))
    assert suite.task("train", 2_103_381_652).seed in train  # a procedural sampler's index: folded, never past
    assert suite.task("eval_in_distribution", 50_000) == suite.task("eval_in_distribution", 0)
    assert suite.split_size("train") == 100 and suite.max_steps == 6  # the env's own max_turns


def test_the_same_held_out_tasks_every_evaluation_and_a_resumable_train_stream():
    suite = build(env_cfg(eval_seeds=20))
    assert evaluation_tasks(suite, "eval_in_distribution", 8) == evaluation_tasks(suite, "eval_in_distribution", 8)
    sampler = TaskSampler(suite, "train", seed=3)
    first = sampler.next(4)
    resumed = TaskSampler(suite, "train", seed=3)
    resumed.load_state_dict(sampler.state_dict())
    fresh = TaskSampler(suite, "train", seed=3)
    fresh.next(4)
    assert [t.seed for t in resumed.next(4)] == [t.seed for t in fresh.next(4)]
    assert all(t.seed < 1_000_000 for t in first)


def test_an_ood_split_is_the_held_out_seeds_on_an_env_made_with_other_kwargs():
    suite = build(env_cfg(ood_kwargs={"length": 5}))
    assert suite.splits[-1] == "eval_out_of_distribution"
    task = suite.task("eval_out_of_distribution", 0)
    assert task.seed == suite.task("eval_in_distribution", 0).seed
    env = suite.make_env()
    assert "door at 5" in env.reset(task).text
    assert "door at 3" in env.reset(suite.task("eval_in_distribution", 0)).text  # rebuilt with the train kwargs


def play(suite, actions: list[str]) -> list[Step]:
    env = suite.make_env()
    env.reset(Task("t", "toy", seed=0))
    return [env.step(a) for a in actions]


def test_success_is_the_info_flag_and_listed_actions_are_checked():
    steps = play(build(env_cfg()), ["right", "jump", "right", "right"])
    assert [s.won for s in steps] == [False, False, False, True] and steps[-1].done
    assert [s.action_valid for s in steps] == [True, False, True, True]
    assert steps[0].observation.admissible_actions == ["left", "right"]


def test_a_partial_reward_at_the_limit_is_not_success_but_the_threshold_is():
    suite = build(env_cfg("tests.envs.toy_gym:make_partial", success_reward=1.0))
    timed_out = play(suite, ["left"] * 6)
    assert timed_out[-1].done and timed_out[-1].reward == 0.5 and not timed_out[-1].won
    assert play(suite, ["right"] * 3)[-1].won


def test_env_reward_success_pays_the_win_only():
    suite = build(env_cfg("tests.envs.toy_gym:make_partial", success_reward=1.0, reward="success"))
    assert [s.reward for s in play(suite, ["left"] * 6)] == [0.0] * 6  # the env's 0.5 at its limit is not paid
    assert [s.reward for s in play(suite, ["right"] * 3)] == [0.0, 0.0, 1.0]


def test_without_a_list_the_random_action_gives_the_candidates():
    suite = build(env_cfg("tests.envs.toy_gym:make_unlisted"))
    first = suite.make_env().reset(Task("t", "toy", seed=0))
    assert set(first.admissible_actions) <= {"left", "right"} and first.admissible_actions
    assert suite.random_policy_problem is None
    assert "no random policy" in build(env_cfg("tests.envs.toy_gym:make_no_sample")).random_policy_problem


def test_the_anchor_is_the_state_key_where_given_else_the_text():
    keyed = build(env_cfg(kwargs={"keyed": True})).make_env()
    a = keyed.reset(Task("t", "toy", seed=0))
    b = keyed.step("right").observation
    c = keyed.step("left").observation
    assert a.anchor() == c.anchor() == 0 and b.anchor() == 1  # the same position twice: one step group
    plain = build(env_cfg()).make_env()
    assert plain.reset(Task("t", "toy", seed=0)).anchor() == "Reach the door at 3. You stand at 0."


def test_a_random_policy_plays_it_through_the_collector():
    suite = build(env_cfg())
    tasks = [suite.task("eval_in_distribution", i) for i in range(6)]
    batch = collect(suite, tasks, 2, RandomPolicy(0), PromptSpec("generic", 2))
    assert len(batch.episodes) == 12 and any(e.won for e in batch.episodes)
    assert "<action> </action> tags" in batch.prompt[0] and "Reach the door" in batch.prompt[0]


def test_an_env_with_an_expert_plan_is_an_expert_that_sft_plays():
    from agentrl.config.sft import SftConfig, SftRunConfig
    from agentrl.envs.base import has_expert
    from agentrl.train.sft import expert_demonstrations

    suite = build(env_cfg())
    assert has_expert(suite) and suite.expert_plan(suite.task("train", 0)) == ["right"] * 3
    cfg = SftRunConfig(env=env_cfg(), sft=SftConfig(episodes=4))
    pairs, expert = expert_demonstrations(suite, cfg)
    assert expert == {"expert_episodes": 4, "expert_success": 1.0}
    assert len(pairs) == 3 + 2 + 3 + 2 and all(reply == "<action>right</action>" for _, reply in pairs)  # seeds 0-3
    assert not has_expert(build(env_cfg("tests.envs.toy_gym:make_no_sample")))


def test_each_env_has_its_own_global_rng_state_and_leaves_the_callers_as_it_was():
    import random

    import numpy as np

    suite = build(env_cfg("tests.envs.toy_gym:make_global_dice", kwargs={}))

    def alone(seed):
        env = suite.make_env()
        return [env.reset(Task("t", "dice", seed=seed)).text] + [env.step("roll").observation.text for _ in range(5)]

    expected = {seed: alone(seed) for seed in (3, 4, 5)}
    random.seed(123)
    np.random.seed(123)
    caller = (random.getstate(), np.random.get_state())
    envs = {seed: suite.make_env() for seed in (3, 4, 5)}
    seen = {seed: [env.reset(Task("t", "dice", seed=seed)).text] for seed, env in envs.items()}
    for _ in range(5):  # in lockstep, as the collector plays in-process episodes
        for seed, env in envs.items():
            seen[seed].append(env.step("roll").observation.text)
    envs[3]._candidates()  # the candidates' draws and an expert's plan do not touch the caller's state either
    envs[4].expert_plan()
    assert seen == expected and len({tuple(v) for v in seen.values()}) == 3
    assert random.getstate() == caller[0]
    after = np.random.get_state()
    assert after[0] == caller[1][0] and (after[1] == caller[1][1]).all() and after[2:] == caller[1][2:]


def test_the_candidates_draws_leave_the_episodes_chance_as_it_was():
    unlisted = {"listed": False}  # the candidates are draws of its sample_random_action()
    few = build(env_cfg("tests.envs.toy_gym:make_global_dice", kwargs=unlisted, random_candidates=1)).make_env()
    many = build(env_cfg("tests.envs.toy_gym:make_global_dice", kwargs=unlisted, random_candidates=50)).make_env()
    for env in (few, many):
        env.reset(Task("t", "dice", seed=9))
    assert [few.step("roll").observation.text for _ in range(4)] == [
        many.step("roll").observation.text for _ in range(4)
    ]


@pytest.mark.parametrize(
    ("factory", "says"),
    [
        ("no_such_module:make", "does not import: ModuleNotFoundError"),
        ("tests.envs.toy_gym:missing", "has no 'missing'"),
        ("tests.envs.toy_gym:NOT_CALLABLE", "is a int, not a callable"),
        ("tests.envs.toy_gym", "is not MODULE:CALLABLE"),
        ("tests.envs.toy_gym:make_nothing", "without reset and step()"),
        ("tests.envs.toy_gym:make_number_observation", "not text (str)"),
        ("tests.envs.toy_gym:make_needs_network", "fetches data from the network"),
    ],
)
def test_a_broken_factory_or_env_is_one_line_at_build(factory, says):
    with pytest.raises(UserError, match="^env.factory=") as caught:
        build(env_cfg(factory))
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_nan_reward_or_a_bad_observation_mid_run_faults_that_episode_only():
    suite = build(env_cfg("tests.envs.toy_gym:make_nan"))
    with InlinePool(suite.make_env) as pool:
        assert isinstance(pool.reset([(0, Task("t", "toy", seed=0))])[0], Observation)
        (outcome,) = pool.step([(0, "right")])
    assert isinstance(outcome, EnvFault) and "not a finite number" in outcome.message


@pytest.mark.slow
def test_agentrl_train_runs_on_it_end_to_end(tmp_path):
    """The whole route from the command line: the tiny model built on the env's own text, trained, evaluated."""
    run = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "agentrl.cli",
        "train",
        "env=gym",
        "env.factory=toy_gym:make_corridor",  # a file in the working directory is enough
        "+debug=fast",
        "model.tiny.demo_turns=200",
        "logger=none",
        f"hydra.run.dir={run}",
    ]
    env = {**os.environ, "AGENTRL_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO / "tests" / "envs", env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/success" in r for r in records)
    assert (run / "checkpoints" / "last").is_dir()
