"""`agentrl eval ... +experiment=NAME` and `agentrl eval model=NAME`: an evaluation as training would compose it.

A recipe (conf/experiment/NAME.yaml) and a model choice (conf/model/NAME.yaml) set training's sections (model,
trainer, algo, and the environment's prompt template where the model reads its own), which the eval config has
not, so Hydra cannot compose them into the eval config. They are composed here as `agentrl train` would compose
them, with the command line's env, env.*, model.* and rollout.* overrides, and the env and eval sections are written
to a file that the evaluation reads as it reads a training run's config (agentrl/evaluation/held_out.py): the
recipe's environment, its eval settings unless eval.* is given on the command line. Where the command line names
a model (`model=NAME` or a `model.*` key) the file also holds the model and rollout sections, and the evaluation
plays that model zero-shot: what `agentrl train model=NAME` starts from.
"""

from __future__ import annotations

from pathlib import Path

from agentrl.hydra_paths import hydra_quote

RECIPE_CONFIG = "recipe_config"  # the eval config's key for the file written here


def _key(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+~")


def _override_of(arg: str, *groups: str) -> bool:
    """Whether `arg` is an override of one of `groups` or of a key in them."""
    key = _key(arg)
    return "=" in arg and not arg.startswith("-") and any(key == g or key.startswith(g + ".") for g in groups)


def _for_recipe(arg: str) -> bool:
    """An override that the composition takes from the eval's command line: the recipe itself, the env or the model
    (their groups or keys)."""
    return _override_of(arg, "experiment", "env", "model")


def names_recipe(args: list[str]) -> bool:
    """Whether the command line names a recipe (`+experiment=NAME` or `experiment=NAME`)."""
    return any("=" in arg and _key(arg) == "experiment" for arg in args)


def names_model(args: list[str]) -> bool:
    """Whether the command line names a model to evaluate zero-shot (`model=NAME`, or a `model.*` key)."""
    return any(_override_of(arg, "model") for arg in args)


def with_recipe_config(args: list[str], folder: Path) -> list[str]:
    """The eval's arguments with the recipe's overrides replaced by `recipe_config=<a file in folder>`: the env and
    eval sections of the train config that the recipe and those overrides compose (a mistake in them: UserError)."""
    from omegaconf import OmegaConf

    from agentrl.cli.launch import parse_args, preflight_groups
    from agentrl.hydra_paths import with_config_dir
    from agentrl.run_folder import as_container

    command = parse_args(args)
    # rollout.* goes to the composition too (the model's generation length and prompt budget), and stays for the
    # evaluation's own rollout section (its backend)
    recipe = [arg for arg in command.overrides if _for_recipe(arg) or _override_of(arg, "rollout")]
    job, _ = preflight_groups("train", with_config_dir(recipe, command.parsed.config_dir))
    path = folder / "recipe.yaml"
    sections = {"env": as_container(job.env), "eval": as_container(job.eval)}
    if names_model(args):
        sections |= {"model": as_container(job.model), "rollout": as_container(job.rollout)}
    OmegaConf.save(OmegaConf.create(sections), path)
    kept = [arg for arg in args if not _for_recipe(arg)]
    return [*kept, f"{RECIPE_CONFIG}={hydra_quote(str(path))}"]
