"""The environment schemas: the keys every environment has (`EnvConfig`, which a plug-in's schema extends;
docs/environments.md) and the built-in environments' own (household, its team variant, ALFWorld, ScienceWorld)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from annotated_types import Ge, Gt, Interval, MinLen
from omegaconf import MISSING

from agentrl.config.values import EPISODE_STEPS, SEED, checked, valid
from agentrl.envs.household import LEVELS as HOUSEHOLD_LEVELS
from agentrl.rollout.parsing import REPLY_FORMATS
from agentrl.rollout.prompts import TEMPLATES


@dataclass
class EnvConfig:
    """Keys every environment has; each environment's schema extends it."""

    name: str = field(default=MISSING, metadata=valid(MinLen(1)))
    history_length: int = checked(2, Ge(0))  # last H observation/action pairs in the prompt (reference: 2)
    prompt_template: str = checked("alfworld", TEMPLATES)  # see agentrl/rollout/prompts.py
    max_steps: int | None = checked(None, EPISODE_STEPS)  # None: the environment's own default
    num_workers: int = checked(0, Ge(0))  # environment worker processes; 0 runs them in the trainer's process
    step_timeout_s: float = checked(60.0, Gt(0))  # a reset or step slower than this ends its episode as failed
    # probability that an episode's environment raises, at its reset or a step (fault injection for tests)
    fault_rate: float = checked(0.0, Interval(ge=0, lt=1))
    # seconds each environment step waits first (a benchmark key: an environment whose steps take time)
    step_latency_s: float = checked(0.0, Interval(ge=0, le=60))
    # an iteration whose share of faulted episodes is above this stops the run
    max_fault_share: float = checked(0.5, Interval(gt=0, le=1))


@dataclass
class HouseholdEnvConfig(EnvConfig):
    name: str = checked("household", MinLen(1))
    level: str = checked("default", tuple(HOUSEHOLD_LEVELS))  # see agentrl/envs/household.py


@dataclass
class HouseholdTeamEnvConfig(HouseholdEnvConfig):
    """env=household_team: the household world played by checker, actor and finisher (agentrl/envs/household_team.py)."""

    name: str = checked("household_team", MinLen(1))


@dataclass
class AlfworldEnvConfig(EnvConfig):
    name: str = checked("alfworld", MinLen(1))
    max_steps: int | None = checked(50, EPISODE_STEPS)  # reference: 50
    # a download laid out as json_2.1.1/...; None: $ALFWORLD_DATA, else generated games
    data_dir: str | None = checked(None, MinLen(1))
    generated_per_type: int = checked(10, Ge(1))  # synthetic games per task type and split, when there is no download
    generation_seed: int = checked(0, SEED)


@dataclass
class ScienceworldEnvConfig(EnvConfig):
    name: str = checked("scienceworld", MinLen(1))
    max_steps: int | None = checked(30, EPISODE_STEPS)  # EPO's script: max_steps=30 for sciworld
    prompt_template: str = checked("scienceworld", TEMPLATES)
    # the reference's preset; "" for none, or a comma list (teleportAction,...): any string, the engine checks it
    simplifications: str = checked("easy")
    # task names; None: the 29 of EPO's index files (docs/environments.md)
    tasks: list[str] | None = checked(None, MinLen(1))
    env_step_limit: int = checked(100, Ge(1))  # the engine's own move limit (the reference's envStepLimit)
    anchor: str = checked("state", ("state", "observation"))  # GiGPO's anchor key: the object tree's hash, or the text
    java_options: str = checked(
        "-Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
    )  # each slot's JVM (~210 MB resident)


@dataclass
class SeededEnvConfig(EnvConfig):
    """Keys of the routes whose tasks are seeds (env=gym, env=gem; agentrl/envs/gym_text.py)."""

    prompt_template: str = checked("generic", TEMPLATES)
    kwargs: Any = field(default_factory=dict)  # passed to the factory (a mapping)
    # kwargs for the eval_out_of_distribution split, on the held-out seeds; None: no such split
    ood_kwargs: Any = None
    train_seeds: int = checked(1_000_000, Ge(1))  # train: seeds seed_base .. seed_base + train_seeds - 1
    eval_seeds: int = checked(10_000, Ge(1))  # held-out: the next eval_seeds seeds
    seed_base: int = checked(0, Ge(0))
    # where the env lists no actions: draws of its sample_random_action() shown as candidates
    random_candidates: int = checked(8, Ge(1))
    # env: the environment's own rewards; success: 1 on the winning step, 0 elsewhere (docs/environments.md)
    reward: str = checked("env", ("env", "success"))


@dataclass
class GymEnvConfig(SeededEnvConfig):
    """env=gym: a Gymnasium-style text environment from `factory` (docs/environments.md)."""

    name: str = checked("gym", MinLen(1))
    factory: str = field(default=MISSING, metadata=valid(MinLen(3)))  # MODULE:CALLABLE
    reply_format: str = checked("action", REPLY_FORMATS)  # action: <action>X</action>; boxed: \\boxed{X}
    # success where no info flag (is_success, success, won) says: a terminating, not truncated step with at least
    # this reward, or whose observation starts with success_text
    success_reward: float | None = checked(None)  # any number
    success_text: str | None = checked(None, MinLen(1))


@dataclass
class GemEnvConfig(SeededEnvConfig):
    """env=gem: one of GEM's environments (gem-llm; docs/environments.md, "GEM")."""

    name: str = checked("gem", MinLen(1))
    id: str = field(default=MISSING, metadata=valid(MinLen(3)))  # a GEM id: game:Sokoban-v0-easy


@dataclass
class ToolsEnvConfig(EnvConfig):
    """env=tools: agents that call tools, from TRL's environment_factory and tools= (agentrl/envs/tools_env.py)."""

    name: str = checked("tools", MinLen(1))
    # the prompt is the conversation in the model's chat template: no template, no history window
    history_length: int = checked(0, Ge(0))  # unused on this route: every turn's prompt is the whole conversation
    factory: str | None = checked(None, MinLen(3))  # MODULE:CALLABLE, TRL's environment_factory; None: env.tools only
    # MODULE:FUNCTION each, TRL's tools= (plain functions); empty: the factory's methods alone
    tools: list[str] = field(default_factory=list, metadata=valid(hint="a list of MODULE:FUNCTION"))
    # MODULE:FUNCTION each, TRL's reward-function signature; empty: the factory's get_reward() alone
    reward_funcs: list[str] = field(default_factory=list, metadata=valid(hint="a list of MODULE:FUNCTION"))
    expert: str | None = checked(None, MinLen(3))  # MODULE:FUNCTION, fn(environment, **columns) -> the actions
    dataset: str | None = checked(None, MinLen(1))  # a JSONL file or a datasets folder: one task a row
    eval_dataset: str | None = checked(None, MinLen(1))  # held-out rows; None: eval_rows of dataset set aside
    eval_rows: int = checked(100, Ge(1))  # rows of dataset held out (a fixed shuffle) when no eval_dataset
    prompt: Any = None  # one prompt for every task (a string or chat messages); the tasks are then seeds
    train_seeds: int = checked(1_000_000, Ge(1))  # with prompt: train seeds seed_base .. seed_base + train_seeds - 1
    eval_seeds: int = checked(10_000, Ge(1))  # with prompt: held-out seeds, the next eval_seeds
    seed_base: int = checked(0, Ge(0))
    max_steps: int | None = checked(8, EPISODE_STEPS)  # model turns per episode (a reply without a tool call ends it)
    success_reward: float = checked(1.0)  # any number: success where no is_success/success attribute says
    tool_timeout_s: float = checked(10.0, Gt(0))  # a tool call slower than this is answered with a timeout error
