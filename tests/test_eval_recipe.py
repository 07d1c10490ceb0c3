"""`agentrl eval ... +experiment=NAME`: the evaluation takes the recipe's env and eval settings (cli/eval_recipe.py)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from agentrl.cli.eval_recipe import names_recipe, with_recipe_config
from agentrl.cli.launch import normalise_args, preflight
from agentrl.errors import UserError
from agentrl.run_folder import as_container

RECIPE = "smollm2_household_cpu"  # env.level=default, prompt_template=compact, eval.num_tasks=64


def test_only_a_recipe_is_composed_as_training():
    assert names_recipe([f"+experiment={RECIPE}"]) and names_recipe([f"experiment={RECIPE}", "seed=1"])
    assert not names_recipe(["env=gem", "env.id=game:Sokoban-v0-easy", "eval.num_tasks=5"])


def test_the_recipe_and_its_env_overrides_become_one_file(tmp_path):
    args = ["policy=random", f"+experiment={RECIPE}", "env.max_steps=7", "eval.temperature=0.9", "seed=3"]
    out = with_recipe_config(args, tmp_path)
    assert out[:-1] == ["policy=random", "eval.temperature=0.9", "seed=3"]  # the eval's own, in their order
    assert out[-1].startswith("recipe_config=")
    written = OmegaConf.to_container(OmegaConf.load(tmp_path / "recipe.yaml"))
    composed = preflight("train", normalise_args([f"+experiment={RECIPE}", "env.max_steps=7"]))
    assert written == {"env": as_container(composed.env), "eval": as_container(composed.eval)}
    assert written["env"]["level"] == "default" and written["env"]["max_steps"] == 7
    assert written["eval"]["num_tasks"] == 64


def test_a_mistake_in_the_recipe_is_one_line(tmp_path):
    with pytest.raises(UserError):
        with_recipe_config(["+experiment=no_such_recipe"], tmp_path)
    with pytest.raises(UserError, match="max_step"):
        with_recipe_config([f"+experiment={RECIPE}", "env.max_step=7"], tmp_path)


def test_random_play_on_a_recipe_s_env_with_its_eval_settings(run_cli, tmp_path):
    out = tmp_path / "random"
    result = run_cli("eval", "--random", f"+experiment={RECIPE}", "eval.num_tasks=3", f"output={out}")
    assert result.returncode == 0, result.stderr[-2000:]
    protocol = json.loads((out / "eval.json").read_text())["protocol"]
    assert protocol["env"]["level"] == "default" and protocol["env"]["prompt_template"] == "compact"
    assert protocol["tasks"] == 3 and protocol["sources"]["num_tasks"] == "command line"
    assert protocol["sources"]["temperature"] == "recipe"
