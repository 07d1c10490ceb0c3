"""The schemas registered in Hydra's ConfigStore, so that an unknown key or a value of the wrong type fails at
composition time."""

from __future__ import annotations

from agentrl.config.envs import (
    AlfworldEnvConfig,
    GemEnvConfig,
    GymEnvConfig,
    HouseholdEnvConfig,
    HouseholdTeamEnvConfig,
    ScienceworldEnvConfig,
    ToolsEnvConfig,
)
from agentrl.config.run import EvalRunConfig, TrainConfig
from agentrl.config.sft import SftRunConfig


def register_resolvers() -> None:
    """The interpolations agentrl's configs use beyond OmegaConf's own (idempotent):
    `${agentrl.per_machine:total,machines}`, each machine's share of a total (conf/hardware/slurm.yaml's GPUs per
    node), the whole share rounded up so that a total that does not split asks for enough (the checks refuse it)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("agentrl.per_machine"):
        OmegaConf.register_new_resolver("agentrl.per_machine", lambda total, machines: -(-int(total) // int(machines)))


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent), and agentrl's resolvers."""
    from hydra.core.config_store import ConfigStore

    register_resolvers()

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="eval_schema", node=EvalRunConfig)
    cs.store(name="sft_schema", node=SftRunConfig)
    cs.store(group="env", name="household_schema", node=HouseholdEnvConfig)
    cs.store(group="env", name="household_team_schema", node=HouseholdTeamEnvConfig)
    cs.store(group="env", name="alfworld_schema", node=AlfworldEnvConfig)
    cs.store(group="env", name="scienceworld_schema", node=ScienceworldEnvConfig)
    cs.store(group="env", name="gym_schema", node=GymEnvConfig)
    cs.store(group="env", name="gem_schema", node=GemEnvConfig)
    cs.store(group="env", name="tools_schema", node=ToolsEnvConfig)
    from agentrl.envs.registry import register_plugin_configs

    register_plugin_configs()  # installed plug-ins: their env/<name>.yaml on the search path, their schemas


def compose_config(config_name: str, overrides: list[str]):
    """`config_name` (train, sft, eval) composed from agentrl's own conf/ with the schemas registered, outside a
    Hydra app: for the scripts that build or measure from a config as the CLI would compose it."""
    from hydra import compose, initialize_config_dir

    from agentrl.hydra_paths import config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)
