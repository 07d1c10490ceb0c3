"""`agentrl eval ... +experiment=NAME`: an evaluation on a recipe's environment and evaluation settings.

A recipe (conf/experiment/NAME.yaml) sets training's sections (model, trainer, algo), which the eval config has
not, so Hydra cannot compose it into the eval config. It is composed here as `agentrl train` would compose it,
with the command line's env and env.* overrides, and its env and eval sections are written to a file that the
evaluation reads as it reads a training run's config (agentrl/evaluation/held_out.py): the recipe's environment,
its eval settings unless eval.* is given on the command line.
"""

from __future__ import annotations

from pathlib import Path

from agentrl.hydra_paths import hydra_quote

RECIPE_CONFIG = "recipe_config"  # the eval config's key for the file written here


def _key(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+~")


def _for_recipe(arg: str) -> bool:
    """An override that the recipe's composition takes: the recipe itself, the env group or an env.* key."""
    key = _key(arg)
    return "=" in arg and not arg.startswith("-") and (key in ("experiment", "env") or key.startswith("env."))


def names_recipe(args: list[str]) -> bool:
    """Whether the command line names a recipe (`+experiment=NAME` or `experiment=NAME`)."""
    return any("=" in arg and _key(arg) == "experiment" for arg in args)


def with_recipe_config(args: list[str], folder: Path) -> list[str]:
    """The eval's arguments with the recipe's overrides replaced by `recipe_config=<a file in folder>`: the env and
    eval sections of the train config that the recipe and those overrides compose (a mistake in them: UserError)."""
    from omegaconf import OmegaConf

    from agentrl.cli.launch import parse_args, preflight_groups
    from agentrl.hydra_paths import with_config_dir
    from agentrl.run_folder import as_container

    command = parse_args(args)
    recipe = [arg for arg in command.overrides if _for_recipe(arg)]
    job, _ = preflight_groups("train", with_config_dir(recipe, command.parsed.config_dir))
    path = folder / "recipe.yaml"
    OmegaConf.save(OmegaConf.create({"env": as_container(job.env), "eval": as_container(job.eval)}), path)
    kept = [arg for arg in args if not _for_recipe(arg)]
    return [*kept, f"{RECIPE_CONFIG}={hydra_quote(str(path))}"]
