"""What a config value may be: the enums of the schema's string choices, the ranges several sections share, and the
`valid`/`checked` helpers that state a field's valid values beside it. agentrl/config/checks.py applies the stated
values (``check_fields``).

Every enum is a ``StrEnum`` whose members' names are their values: a member equals, hashes and prints as its
string (``Backend.vllm == "vllm"``, ``f"{Backend.vllm}"`` is ``vllm``), so code reads an enum field as it reads a
string, and a config read back from a file (strings) compares the same."""

from __future__ import annotations

import sys
from dataclasses import field
from enum import Enum
from typing import Any

from annotated_types import Interval

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 has no StrEnum: the same behaviour for the enums below (a member prints as its value)

    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str.__str__(self)


class Norm(StrEnum):
    """Advantage normalisation (docs/algorithms.md, GRPO): subtract the group mean, optionally divide by std."""

    none = "none"
    std = "std"


class EpisodeStats(StrEnum):
    """What GRPO's group statistics are taken over (docs/algorithms.md, GRPO and Dr. MAS)."""

    rows = "rows"  # every step row's penalised score (verl-agent's reference code)
    episodes = "episodes"  # every episode's return, once (GiGPO paper Eq. 3)
    episode_means = "episode_means"  # every episode's mean row score, once (Dr. MAS's baseline, its Eq. 2)


# Which rows share the advantage statistics (docs/algorithms.md, "Dr. MAS: agent-wise normalisation"):
# global, a task group's rows; agent, the rows of one agent in a task group (Dr. MAS, arXiv 2602.08847, Eq. 5).
# The functional form because `global` is a Python keyword, and OmegaConf matches a value by the member's name.
NormScope = StrEnum("NormScope", {"global": "global", "agent": "agent"})


class Estimator(StrEnum):
    """The advantage estimator (agentrl/algos/grpo.py: grpo, rloo; agentrl/algos/gigpo.py: gigpo)."""

    grpo = "grpo"
    gigpo = "gigpo"
    rloo = "rloo"


class AnchorKind(StrEnum):
    """What makes two GiGPO step rows "the same state"."""

    state = "state"  # the environment's true-state key where it has one, else the observation text
    observation = "observation"  # the observation text, as the reference does


class EntropyMode(StrEnum):
    none = "none"
    bonus = "bonus"  # L = L_policy - coef * L_H
    epo = "epo"  # L = L_policy - coef * (L_H - beta_k * L_smooth) (EPO v2)


class EntropyAggregation(StrEnum):
    trajectory = "trajectory"  # mean over episodes of the mean over turns of the token mean (EPO)
    token = "token"  # mean over every completion token of the batch


class LossAggregation(StrEnum):
    """How per-token losses are reduced over a mini-batch (agentrl/algos/policy_loss.py: masked_total)."""

    token_mean = "token_mean"  # reference: mean over every completion token of the mini-batch
    seq_mean = "seq_mean"  # mean over the mini-batch's rows of each row's token mean


class Backend(StrEnum):
    """Who generates the rollouts: Hugging Face `generate` on the training model, or vLLM through TRL."""

    hf = "hf"
    vllm = "vllm"


# TRL's vllm_importance_sampling_mode values
IMPORTANCE_SAMPLING_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


class VllmMode(StrEnum):
    colocate = "colocate"  # a vLLM engine inside every training process, sharing its GPU
    server = "server"  # a separate `trl vllm-serve` process; rank 0 talks to it


class Strategy(StrEnum):
    """The multi-process engine; each has an accelerate config under conf/accelerate/."""

    ddp = "ddp"
    deepspeed_zero2 = "deepspeed_zero2"
    deepspeed_zero3 = "deepspeed_zero3"
    fsdp = "fsdp"


class LrSchedule(StrEnum):
    """The learning rate over a run's iterations (transformers' schedules; the update's steps within one iteration
    share its rate): constant, or falling from `trainer.learning_rate` to 0 at the last iteration."""

    constant = "constant"
    linear = "linear"
    cosine = "cosine"


class Precision(StrEnum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class Device(StrEnum):
    cpu = "cpu"
    cuda = "cuda"


class WandbMode(StrEnum):
    offline = "offline"
    online = "online"
    disabled = "disabled"


class PolicyKind(StrEnum):
    checkpoint = "checkpoint"
    random = "random"


# --------------------------------------------------------------------------- what a value may be

SEED = Interval(ge=0, lt=2**31)  # numpy's seeds end at 2**32; ranks add their index to some seeds
PORT = Interval(ge=1, le=65535)
# An episode's turn limit: the tiny model's build check and every rollout play episodes to it, so a huge one would
# keep a run's start busy for hours (household's levels take 10-30 turns, ALFWorld's reference 50).
EPISODE_STEPS = Interval(ge=1, le=1000)
SHARE = Interval(ge=0, le=1)


def valid(*rules: Any, hint: str = "") -> dict[str, Any]:
    """A field's valid values, stated beside it (``field(default=..., metadata=valid(Ge(1)))``): annotated_types
    constraints that pydantic applies (``Ge``, ``Gt``, ``Interval``, ``MinLen``), or one tuple of the allowed
    strings; none at all: any value of the type. null passes where the type is optional, and a float must be
    finite. One checker applies them all: ``agentrl/config/checks.py: check_fields``; rules between fields are
    ``check_cross_fields`` there."""
    return {"valid": rules, "hint": hint}


def checked(default: Any, *rules: Any, hint: str = "") -> Any:
    """A field with its default and its valid values (`valid`): ``history_length: int = checked(2, Ge(0))``."""
    return field(default=default, metadata=valid(*rules, hint=hint))
