"""The config is typed once, at the boundary (agentrl/config/typed.py): a composed config becomes the schema's
dataclasses, which every layer below reads; records write it back as plain values."""

from __future__ import annotations

import pytest
from hydra import compose
from omegaconf import OmegaConf

from agentrl.config.checks import check_config
from agentrl.config.envs import HouseholdEnvConfig
from agentrl.config.run import TrainConfig
from agentrl.config.typed import typed
from agentrl.config.values import Backend, Estimator, Precision
from agentrl.errors import UserError
from agentrl.run_folder import as_container
from tests.conftest import hydra_initialized


def test_a_composed_config_becomes_the_schemas_dataclasses():
    with hydra_initialized():
        cfg = typed(compose(config_name="train", overrides=["env=scienceworld", "env.tasks=[boil,melt]"]))
    assert type(cfg) is TrainConfig and type(cfg.env).__name__ == "ScienceworldEnvConfig"
    assert cfg.rollout.backend is Backend.hf and cfg.algo.estimator is Estimator.gigpo  # the tiny recipe's
    assert type(cfg.env.tasks) is list and cfg.env.tasks == ["boil", "melt"]
    assert typed(cfg) is cfg  # typed once: a typed config passes as it is
    check_config(cfg)


def test_an_enum_field_reads_as_its_string():
    cfg = TrainConfig(env=HouseholdEnvConfig())
    assert cfg.hardware.precision == "fp32" and f"{cfg.hardware.precision}" == "fp32"
    assert {"fp32": 1}[cfg.hardware.precision] == 1 and str(Precision.bf16) == "bf16"


def test_records_write_plain_values():
    record = as_container(TrainConfig(env=HouseholdEnvConfig()))
    assert record["rollout"]["backend"] == "hf" and type(record["rollout"]["backend"]) is str
    assert record["env"]["name"] == "household"


def test_a_plugin_env_without_a_schema_keeps_its_composed_section():
    composed = OmegaConf.structured(TrainConfig)
    composed.model.name = "tiny"
    composed.env = {"name": "plain", "lamps": 3}  # a plug-in that registers no dataclass
    cfg = typed(composed)
    assert cfg.env.name == "plain" and cfg.env.lamps == 3
    with pytest.raises(Exception, match="read-only"):
        cfg.env.lamps = 4
    composed.env.lamps = 5  # the composed config stays as it was: a sweep's other values still apply to it
    assert cfg.env.lamps == 3
    check_config(cfg)  # no rule is stated for its keys; the rest is checked


def test_a_missing_value_is_one_line():
    composed = OmegaConf.structured(TrainConfig)  # env and model.name are MISSING
    with pytest.raises(UserError, match=r"^\S+ needs a value; set it on the command line"):
        typed(composed)


def test_the_checks_refuse_an_untyped_config():
    with hydra_initialized():
        composed = compose(config_name="train")
    with pytest.raises(TypeError, match="typed config"):
        check_config(composed)
