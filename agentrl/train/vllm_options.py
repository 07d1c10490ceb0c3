"""vLLM rollouts through TRL: the GRPOConfig options, and TRL 1.16's importance-sampling ratio.

With `rollout.backend=vllm` TRL owns the vLLM engine (colocate or server) and its weight sync;
agentrl only maps `rollout.vllm.*` onto GRPOConfig's `vllm_*` options. vLLM's sampling
log-probs differ from the trainer's recomputed ones (kernels, precision), so TRL corrects the
loss by a truncated or masked importance ratio; `importance_sampling_ratio` is that formula as a
pure function, for the trainer's own batch building and for tests.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from agentrl.config.values import IMPORTANCE_SAMPLING_MODES


def grpo_vllm_kwargs(cfg: Any) -> dict[str, Any]:
    """GRPOConfig keyword arguments for `cfg.rollout` (cfg is the training config)."""
    rollout = cfg.rollout
    if rollout.backend != "vllm":
        return {"use_vllm": False}
    v = rollout.vllm
    return {
        "use_vllm": True,
        "vllm_mode": str(v.mode),
        "vllm_gpu_memory_utilization": float(v.gpu_memory_utilization),
        "vllm_tensor_parallel_size": int(v.tensor_parallel_size),
        "vllm_enable_sleep_mode": bool(v.enable_sleep_mode),
        "vllm_max_model_length": None if v.max_model_length is None else int(v.max_model_length),
        "vllm_server_host": str(v.server_host),
        "vllm_server_port": int(v.server_port),
        "vllm_server_timeout": float(v.server_timeout),
        "vllm_importance_sampling_correction": bool(v.importance_sampling_correction),
        "vllm_importance_sampling_mode": str(v.importance_sampling_mode),
        "vllm_importance_sampling_clip_max": float(v.importance_sampling_clip_max),
    }


def importance_sampling_ratio(
    old_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> torch.Tensor:
    """TRL 1.16's vLLM importance ratio exp(trainer log-prob - sampling log-prob), constrained by `mode`.

    All inputs are (B, T) with `mask` 1 on completion tokens. Returns (B, T) for token_* modes and
    (B, 1) for sequence_* modes (one ratio for the whole completion), which is what TRL multiplies
    into the per-token loss. *_truncate clamps to [clip_min, clip_max]; *_mask sets ratios outside
    it to 0. A NaN sampling log-prob (vLLM could not give one) contributes no correction: ratio 1.
    """
    if mode not in IMPORTANCE_SAMPLING_MODES:
        raise ValueError(
            f"unknown importance sampling mode {mode!r}; expected one of {', '.join(IMPORTANCE_SAMPLING_MODES)}"
        )
    # Masking before nan_to_num: NaN * 0 is still NaN, so padded and missing positions both end at 0.
    log_diff = torch.nan_to_num((old_logps - sampling_logps) * mask, nan=0.0)
    if mode.startswith("sequence"):
        log_diff = log_diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(log_diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
