"""What the loss forward passes of one iteration saw, summed over tokens and reduced over ranks into metrics."""

from __future__ import annotations

from typing import Any

import torch

from agentrl.algos.policy_loss import ClippedLoss

# metric name -> its column in the totals (column 0 counts the completion tokens)
COLUMNS = {
    "train/entropy": 1,  # mean token entropy of the sampling distribution
    "train/clip_ratio": 2,  # share of tokens where PPO's clip binds (verl's pg_clipfrac)
    "train/dual_clip_ratio": 3,  # share of tokens where the dual-clip cap binds (verl's pg_clipfrac_lower)
    "train/ppo_kl": 4,  # mean of log pi_old - log pi_theta (verl's ppo_kl): how far the steps moved the policy
    "train/kl": 5,  # mean KL estimate to the reference policy (only when the KL term is on)
}


class LossStats:
    """Token-weighted means over every forward pass of an iteration (all mini-batches and epochs)."""

    def __init__(self) -> None:
        self.totals: torch.Tensor | None = None
        self.has_kl = False

    def add(self, mask: torch.Tensor, entropies: torch.Tensor, policy: ClippedLoss, kl: torch.Tensor | None) -> None:
        m = mask.detach().to(torch.float64)
        columns = [
            entropies.detach(),
            policy.clipped,
            policy.dual_clipped,
            -torch.log(policy.ratio.detach()),
            kl.detach() if kl is not None else torch.zeros_like(m),
        ]
        # torch.where, not a product: a padding position's value may be inf, and inf * 0 is NaN
        sums = [m.sum()] + [torch.where(m > 0, c.to(torch.float64), 0.0).sum() for c in columns]
        row = torch.stack(sums)
        self.totals = row if self.totals is None else self.totals + row
        self.has_kl = self.has_kl or kl is not None

    def reduce(self, accelerator: Any) -> dict[str, float]:
        """The means over every rank's tokens (a collective when there are several ranks)."""
        totals = self.totals if self.totals is not None else torch.zeros(len(COLUMNS) + 1, dtype=torch.float64)
        totals = accelerator.reduce(totals.to(accelerator.device), reduction="sum")
        if float(totals[0]) == 0:
            return {}
        out = {name: float(totals[column] / totals[0]) for name, column in COLUMNS.items()}
        if not self.has_kl:
            out.pop("train/kl")
        return out
