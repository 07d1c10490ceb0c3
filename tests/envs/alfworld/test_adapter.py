"""env=alfworld on the real engine: generated games through the CLI, the adapter's rules, a short training run."""

from __future__ import annotations

import json
import sys

import pytest

from agentrl.config.envs import AlfworldEnvConfig
from agentrl.envs.alfworld.adapter import AlfworldEnv, split_first_observation
from agentrl.envs.alfworld.engine import planner_walkthrough
from agentrl.envs.registry import make_suite

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("alfworld_engine")]  # skips without the extra


@pytest.fixture(scope="module")
def games(tmp_path_factory, cache_dir):
    """One game per task type and split, written by `agentrl alfworld generate`, laid out like the download."""
    import os
    import subprocess

    from tests.conftest import REPO

    out = tmp_path_factory.mktemp("alfworld")
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENTRL_CACHE": str(cache_dir)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrl.cli",
            "alfworld",
            "generate",
            "--out",
            str(out),
            "--per-type",
            "1",
            "--seed",
            "3",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "not the ALFRED floor plans" in result.stdout
    return out


@pytest.fixture(scope="module")
def suite(games):
    return make_suite(AlfworldEnvConfig(data_dir=str(games)))


def test_the_download_layout_is_recognised_for_every_split(suite):
    assert suite.splits == ("train", "eval_in_distribution", "eval_out_of_distribution")
    for split in suite.splits:
        assert suite.split_size(split) == 6
        assert {suite.task(split, i).task_type for i in range(6)} == {
            "pick",
            "look",
            "clean",
            "heat",
            "cool",
            "pick_two",
        }


def test_first_observation_and_admissible_commands(suite):
    env = suite.make_env()
    obs = env.reset(suite.task("train", 0))
    assert obs.text.startswith("You are in the middle of a room.") and "Welcome" not in obs.text
    assert obs.task_description and obs.task_description not in obs.text
    assert obs.admissible_actions and "help" not in obs.admissible_actions
    assert any(a.startswith("go to ") for a in obs.admissible_actions)
    assert obs.anchor() == obs.text  # the reference's anchor: the observation text
    env.close()


def test_the_planner_wins_through_the_adapter_and_argv_survives(suite):
    argv = list(sys.argv)
    for i in range(6):
        task = suite.task("eval_out_of_distribution", i)
        env = suite.make_env()
        env.reset(task)
        steps = [env.step(cmd) for cmd in planner_walkthrough(task.payload["gamefile"])]
        assert steps[-1].won and steps[-1].done and steps[-1].reward == 10.0, task.task_id
        assert all(s.action_valid for s in steps) and all(s.reward == 0.0 for s in steps[:-1])
        env.close()
    assert sys.argv == argv


def test_an_inadmissible_command_changes_nothing(suite):
    env = suite.make_env()
    first = env.reset(suite.task("train", 1))
    step = env.step("fly to the moon")
    assert not step.action_valid and not step.done and step.reward == 0.0
    assert step.observation.text == "Nothing happens."
    assert sorted(step.observation.admissible_actions) == sorted(first.admissible_actions)
    env.close()


def test_the_episode_ends_at_max_steps(games):
    env = AlfworldEnv(max_steps=3)
    suite = make_suite(AlfworldEnvConfig(data_dir=str(games), max_steps=3))
    env.reset(suite.task("train", 2))
    steps = [env.step("look") for _ in range(3)]
    assert [s.done for s in steps] == [False, False, True] and not steps[-1].won


def test_split_first_observation():
    text = "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.\n\nYour task is to: put a mug in shelf."
    assert split_first_observation(text) == ("You are in the middle of a room.", "put a mug in shelf.")


def test_a_short_gigpo_training_run_on_the_engine(games, run_cli, tmp_path):
    """The issue's command, `agentrl train +algo=gigpo env=alfworld model=tiny`, shortened by +debug=fast."""
    run_dir = tmp_path / "alf"
    result = run_cli(
        "train",
        "+algo=gigpo",
        "env=alfworld",
        "model=tiny",
        "+debug=fast",
        f"env.data_dir={games}",
        "env.max_steps=6",
        "env.num_workers=2",
        "model.tiny.demo_turns=120",
        "trainer.iterations=1",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] == 1 and records[-1]["rollout/rows"] >= 4
    # ALFWorld's anchor is the observation text; a group's episodes share at least their first observation.
    assert records[-1]["gigpo/step_group_singleton_share"] < 1.0
    info = json.loads((run_dir / "run.json").read_text())
    assert {"alfworld", "textworld"} <= set(info["packages"])  # engine versions are recorded


def test_the_planner_expert_wins_through_the_collector_with_admissible_replies(suite):
    """`agentrl sft`'s ALFWorld expert: the generator's verified walkthrough, played through RL's prompts."""
    from agentrl.rollout.demonstrations import ExpertPolicy, play, won_pairs
    from agentrl.rollout.parsing import parse_action

    env_cfg = AlfworldEnvConfig(data_dir="unused")
    tasks = [suite.task("train", i) for i in range(suite.split_size("train"))]
    batch = play(suite, env_cfg, ExpertPolicy(suite), tasks, "test")
    assert all(e.won for e in batch.episodes)
    assert all(batch.admissible) and all(batch.valid)
    assert all(parse_action(reply).valid for reply in batch.completion)
    assert len(won_pairs(batch)) == len(batch)
