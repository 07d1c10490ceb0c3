"""The algorithm presets compose, combine by override, and refuse settings that cannot apply."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agentrl.cli.launch import config_dir, preflight
from agentrl.config.store import register_configs
from agentrl.errors import UserError
from agentrl.run_folder import as_container

PRESETS = ("grpo", "gigpo", "arpo", "epo")


@pytest.fixture(autouse=True)
def schemas():
    register_configs()


def _sets(preset: dict, composed: dict) -> bool:
    return all(_sets(v, composed[k]) if isinstance(v, dict) else composed[k] == v for k, v in preset.items())


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_composes_and_names_its_paper(name):
    cfg = preflight("train", [f"+algo={name}"])
    preset = OmegaConf.to_container(OmegaConf.load(config_dir() / "algo" / f"{name}.yaml"))
    assert _sets(preset, as_container(cfg.algo))  # every value the preset sets is in
    header = "\n".join((config_dir() / "algo" / f"{name}.yaml").read_text().splitlines()[:4])
    assert "arXiv" in header


def test_the_tiny_recipe_trains_with_gigpo_and_other_models_keep_the_schemas_grpo():
    """conf/model/tiny.yaml chooses GiGPO (measured on the shipped build: docs/algorithms.md); a real model's config
    sets no estimator, so it keeps the schema's GRPO; +algo=grpo, appended after the model, wins over the recipe."""
    assert preflight("train", []).algo.estimator.value == "gigpo"
    assert preflight("train", ["model=smollm2-135m-instruct"]).algo.estimator.value == "grpo"
    assert preflight("train", ["+algo=grpo"]).algo.estimator.value == "grpo"
    assert preflight("train", ["+algo=epo"]).algo.estimator.value == "grpo"


def test_presets_switch_their_part_on():
    assert preflight("train", ["+algo=gigpo"]).algo.estimator.value == "gigpo"
    assert preflight("train", ["+algo=arpo"]).algo.replay.enabled is True
    assert preflight("train", ["+algo=epo"]).algo.entropy.mode.value == "epo"
    grpo = preflight("train", ["+algo=grpo"]).algo
    assert (grpo.estimator.value, grpo.replay.enabled, grpo.entropy.mode.value) == ("grpo", False, "none")


def test_parts_combine_by_override():
    algo = preflight("train", ["+algo=gigpo", "algo.replay.enabled=true", "algo.entropy.mode=epo"]).algo
    assert (algo.estimator.value, algo.replay.enabled, algo.entropy.mode.value) == ("gigpo", True, "epo")


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["+algo=grpo", "algo.gigpo.gamma=0.9"], "algo.gigpo.gamma=0.9 has no effect with algo.estimator=grpo"),
        (["algo.replay.capacity=3"], "algo.replay.capacity=3 has no effect while algo.replay.enabled=false"),
        (["algo.entropy.alpha=0.2"], "algo.entropy.alpha=0.2 has no effect while algo.entropy.mode=none"),
        (["+algo=epo", "algo.entropy.mode=bonus", "algo.entropy.kappa_high=3"], "only algo.entropy.mode=epo reads it"),
        (["+algo=gigpo", "algo.gigpo.similarity=0.9"], "set algo.gigpo.anchor=observation"),
        (["+algo=gigpo", "algo.gigpo.gamma=1.5"], "algo.gigpo.gamma must be in [0, 1]"),
        (["algo.estimator=rloo", "algo.norm=std"], "rloo has no std normalisation"),
        (["+algo=epo", "algo.entropy.kappa_low=3"], "kappa_low <= kappa_high"),
        (["trainer.task_pool=0"], "trainer.task_pool must be >= 1"),
    ],
)
def test_settings_that_cannot_apply_are_one_line_errors(overrides, expected):
    with pytest.raises(UserError) as err:
        preflight("train", overrides)
    message = str(err.value)
    assert expected in message and "\n" not in message


def test_similarity_with_observation_anchors_is_accepted():
    algo = preflight("train", ["+algo=gigpo", "algo.gigpo.anchor=observation", "algo.gigpo.similarity=0.95"]).algo
    assert algo.gigpo.similarity == 0.95
