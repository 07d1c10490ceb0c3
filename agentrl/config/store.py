"""The schemas registered in Hydra's ConfigStore, so that an unknown key or a value of the wrong type fails at
composition time."""

from __future__ import annotations

from agentrl.config.envs import AlfworldEnvConfig, HouseholdEnvConfig, HouseholdTeamEnvConfig, ScienceworldEnvConfig
from agentrl.config.run import EvalRunConfig, TrainConfig
from agentrl.config.sft import SftRunConfig


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="eval_schema", node=EvalRunConfig)
    cs.store(name="sft_schema", node=SftRunConfig)
    cs.store(group="env", name="household_schema", node=HouseholdEnvConfig)
    cs.store(group="env", name="household_team_schema", node=HouseholdTeamEnvConfig)
    cs.store(group="env", name="alfworld_schema", node=AlfworldEnvConfig)
    cs.store(group="env", name="scienceworld_schema", node=ScienceworldEnvConfig)
    from agentrl.envs.registry import register_plugin_configs

    register_plugin_configs()  # installed plug-ins: their env/<name>.yaml on the search path, their schemas
