"""The per-token policy loss as verl computes it: PPO-clip with dual clip, and the clamped low-variance KL.

Pure tensor functions; the trainer (`agentrl/train/trainer.py`) feeds them log-probabilities and reduces
the per-token losses with `masked_total` over a mini-batch (docs/algorithms.md, "How the loss is assembled").
Everything here works on (B, T) tensors of completion tokens; advantages are one value per row, (B,).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

AGGREGATIONS = ("token_mean", "seq_mean")


@dataclass
class ClippedLoss:
    """PPO's per-token loss and where each clip bound."""

    per_token: Tensor  # (B, T)
    ratio: Tensor  # (B, T) rho = pi_theta / pi_old
    clipped: Tensor  # (B, T) bool: the clipped term is the larger loss (verl's pg_clipfrac)
    dual_clipped: Tensor  # (B, T) bool: A < 0 and the dual-clip cap -c*A binds (verl's pg_clipfrac_lower)


def ppo_clip_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
) -> ClippedLoss:
    """PPO's clipped surrogate per token, with dual clip for negative advantages (verl `compute_policy_loss`).

    With rho = exp(log pi_theta - log pi_old) and the row's advantage A (Schulman et al. 2017, Eq. 7):

        l^clip = max(-A * rho, -A * clip(rho, 1 - eps_low, 1 + eps_high))

    Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729, Eq. 5) caps the loss of a negative advantage,
    whose unclipped term grows without bound as rho grows:

        l = min(l^clip, -c * A)   if A < 0,      l = l^clip   otherwise,

    with c = `dual_clip` > 1 (verl `clip_ratio_c`, 3); None leaves l = l^clip.
    """
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    ratio = torch.exp(logps - old_logps)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    clip_binds = clipped > unclipped
    dual_binds = torch.zeros_like(clip_binds)
    if dual_clip is not None:
        if dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        cap = -advantages * dual_clip
        negative = (advantages < 0).expand_as(loss)
        dual_binds = negative & (loss > cap)
        loss = torch.where(negative, torch.minimum(loss, cap), loss)
    return ClippedLoss(loss, ratio, clip_binds, dual_binds)


def low_var_kl(logps: Tensor, ref_logps: Tensor, clamp: float | None = None) -> Tensor:
    """The k3 estimate of KL(pi_theta || pi_ref) per token (DeepSeekMath Eq. 4; verl `kl_penalty` "low_var_kl"):

        k3 = pi_ref / pi_theta - log(pi_ref / pi_theta) - 1,

    clamped to [-clamp, clamp] as verl does (clamp 10); None leaves it unclamped (TRL's form)."""
    log_ratio = ref_logps - logps
    kl = torch.exp(log_ratio) - log_ratio - 1
    return kl if clamp is None else torch.clamp(kl, min=-clamp, max=clamp)


def masked_total(per_token: Tensor, mask: Tensor, aggregation: str) -> Tensor:
    """The numerator of a mini-batch's loss: what is divided by the mini-batch's tokens or rows.

    - "token_mean": the sum over completion tokens, Σ_i Σ_t m_it l_it (divided by Σ m over the mini-batch);
    - "seq_mean": the sum over rows of each row's token mean, Σ_i (Σ_t m_it l_it / Σ_t m_it) (divided by the
      mini-batch's rows). A row without tokens (a padding row) adds 0 either way.

    Split into micro-batches, the totals add up to the mini-batch's, so the loss does not depend on the split."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    m = mask.to(per_token.dtype)
    if aggregation == "token_mean":
        return (per_token * m).sum()
    return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1)).sum()
