"""The off-policy correction of asynchronous training (`rollout.max_staleness=K`, K >= 1): AReaL's decoupled PPO.

With K >= 1 an iteration's rows were sampled by an older policy version, the *behaviour* policy pi_behav, whose
per-token log-probs the rollout records (`batching.sampled_logps`). The old log-probs the trainer recomputes once
before the iteration's first optimizer step are the *proximal* policy pi_prox. Decoupled PPO (Hilton et al.,
arXiv 2110.00641; AReaL, Fu et al. 2025, arXiv 2505.24298) clips the ratio against pi_prox and corrects from
pi_behav to pi_prox with a per-token weight:

    l_it = w_it * l^dual-clip_it(rho_it = pi_theta / pi_prox),    w_it = pi_prox / pi_behav  (detached),

with w_it set to 0 where it exceeds the cap. The per-token loss keeps today's normaliser: the mini-batch's real
tokens (or rows), capped ones included. At K = 0 this module is not used: pi_behav and pi_prox are the same weights
and the loss is exactly `policy_loss.ppo_clip_loss`'s.

Reference: inclusionAI/AReaL at 79b742c1288cab89196ffc43cd3a9ddb1e0306dc, areal/utils/functional.py,
`ppo_actor_loss_fn`, lines 246-335 (the behaviour weight: lines 310-319; the normaliser: 276 and 321), and the
metrics in areal/engine/ppo/actor.py lines 471-477. docs/algorithms.md, "Off-policy correction", lists where
agentrl differs.

Pure tensor functions on (B, T) completion tokens, like agentrl/algos/policy_loss.py; the metrics are totals that
add over micro-batches, mini-batches and ranks, like agentrl/train/loss_metrics.py.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

# AReaL's examples set behav_imp_weight_cap: 5.0 (e.g. examples/math/gsm8k_grpo.yaml line 64 at 79b742c); its
# schema default is None (no cap, areal/api/cli_args.py lines 633-638).
DEFAULT_WEIGHT_CAP = 5.0

# metric name -> what it is; the totals' columns are TOTALS
METRICS = {
    "off_policy/weight_mean": "mean behaviour weight w over the kept tokens (AReaL's behave_imp_weight/avg)",
    "off_policy/weight_std": "population standard deviation of w over the kept tokens",
    "off_policy/weight_max": "largest w among the kept tokens (at most the cap)",
    "off_policy/capped_share": "share of the real tokens whose w exceeded the cap (weight 0)",
}
# columns of a totals row: counts and sums add, the last column is a maximum
TOTALS = ("tokens", "kept", "weight_sum", "weight_sq_sum", "weight_max")
_MAX = TOTALS.index("weight_max")


class BehaviourWeights(NamedTuple):
    weights: Tensor  # (B, T) w = exp(log pi_prox - log pi_behav) on kept tokens, 0 elsewhere; detached
    kept: Tensor  # (B, T) bool: a real token whose w is at most the cap (AReaL's behave_mask)


def behaviour_weights(
    proximal_logps: Tensor, behaviour_logps: Tensor, mask: Tensor, cap: float | None
) -> BehaviourWeights:
    """The per-token behaviour importance weight of decoupled PPO, as AReaL's `ppo_actor_loss_fn` computes it.

    AReaL, areal/utils/functional.py lines 310-318 (inclusionAI/AReaL at 79b742c):

        w_it    = exp(log pi_prox(o_it) - log pi_behav(o_it)),
        kept_it = m_it and w_it <= C            (C = `cap`; kept_it = m_it when `cap` is None),
        w_it    = w_it if kept_it else 0.

    A token whose weight exceeds the cap is masked (weight 0, no gradient), not truncated to the cap; it still
    counts in the loss's normaliser (AReaL's `loss_mask_count`, lines 276 and 321). Padding (m = 0) gets 0 whatever
    its log-probs hold. A real token whose weight is NaN (a missing behaviour log-prob) fails `w <= C` and is
    dropped, as in AReaL; without a cap it stays NaN. Both log-probs are detached: the weight is a constant of the
    step, as AReaL's proximal log-probs are computed without gradient.
    """
    if cap is not None and cap <= 1:
        raise ValueError(f"the behaviour weight cap must be > 1, got {cap}")  # AReaL: "Must be > 1.0"
    real = mask.bool()
    weights = torch.exp(proximal_logps.detach() - behaviour_logps.detach())
    kept = real if cap is None else real & (weights <= cap)
    return BehaviourWeights(torch.where(kept, weights, 0.0), kept)


def correction_totals(weights: Tensor, kept: Tensor, mask: Tensor) -> Tensor:
    """One micro-batch's totals, float64 in the order of `TOTALS`: real tokens, kept tokens, sum and sum of squares
    of the kept weights, and their maximum (0 when none is kept). Add them with `add_totals`."""
    real = mask.bool()
    kept = kept.bool() & real
    w = torch.where(kept, weights.detach().to(torch.float64), 0.0)
    tokens = real.sum().to(torch.float64)
    return torch.stack(
        [tokens, kept.sum().to(torch.float64), w.sum(), (w * w).sum(), w.max() if w.numel() else 0 * tokens]
    )


def add_totals(total: Tensor | None, more: Tensor) -> Tensor:
    """Two totals rows as one: counts and sums add, the maximum is the larger. `total` None starts the sum."""
    if total is None:
        return more.clone()
    out = total + more
    out[_MAX] = torch.maximum(total[_MAX], more[_MAX])
    return out


def reduce_totals(total: Tensor | None, accelerator: Any) -> Tensor:
    """The totals over every rank: one gather when there are several (sums add, the maximum is the largest)."""
    local = total if total is not None else torch.zeros(len(TOTALS), dtype=torch.float64)
    local = local.to(accelerator.device, torch.float64)
    if accelerator.num_processes <= 1:
        return local
    every = accelerator.gather(local[None])  # (ranks, columns)
    out = every.sum(0)
    out[_MAX] = every[:, _MAX].max()
    return out


def correction_metrics(total: Tensor) -> dict[str, float]:
    """`METRICS` from (reduced) totals: the weight's mean, std and max over the kept tokens (AReaL's denominator
    `unclipped_behave_tokens`, areal/engine/ppo/actor.py lines 471-477) and the capped share over the real tokens.
    No real token: {}; no kept token: only the capped share (1.0)."""
    tokens, kept, weight_sum, weight_sq_sum, weight_max = (float(v) for v in total)
    if tokens == 0:
        return {}
    out = {"off_policy/capped_share": (tokens - kept) / tokens}
    if kept > 0:
        mean = weight_sum / kept
        out["off_policy/weight_mean"] = mean
        out["off_policy/weight_std"] = max(weight_sq_sum / kept - mean * mean, 0.0) ** 0.5
        out["off_policy/weight_max"] = weight_max
    return out
