"""PPO-clip with dual clip, the clamped k3 KL and the aggregation totals, against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.algos.policy_loss import low_var_kl, masked_total, ppo_clip_loss

# One token per row; eps = 0.2, c = 3. Per row: the advantage A, the ratio rho, then by hand
# l_clip = max(-A*rho, -A*clip(rho, 0.8, 1.2)) and, for A < 0, l = min(l_clip, -3A).
ADVANTAGES = [1.0, -1.0, -1.0, 1.0, -2.0]
RATIOS = [1.5, 0.5, 5.0, 0.5, 1.1]
# row 0: max(-1.5, -1.2) = -1.2, the clip binds (A > 0, rho above 1 + eps)
# row 1: max(0.5, 0.8) = 0.8, the clip binds (A < 0, rho below 1 - eps); 0.8 < 3: no dual clip
# row 2: max(5, 1.2) = 5 > cap 3: the dual clip binds, l = 3
# row 3: max(-0.5, -0.8) = -0.5: nothing binds (A > 0, rho below 1: the unclipped term is kept)
# row 4: max(2.2, 2.2) = 2.2 < cap 6: nothing binds
WITH_DUAL_CLIP = [-1.2, 0.8, 3.0, -0.5, 2.2]
WITHOUT_DUAL_CLIP = [-1.2, 0.8, 5.0, -0.5, 2.2]
CLIPPED = [True, True, False, False, False]
DUAL_CLIPPED = [False, False, True, False, False]
# d l / d log pi_theta: 0 where a bound is active, else -A * rho (the unclipped term's derivative)
GRADIENTS = [0.0, 0.0, 0.0, -0.5, 2.2]


def _inputs():
    logps = torch.tensor([[math.log(r)] for r in RATIOS], requires_grad=True)
    return logps, torch.zeros(len(RATIOS), 1), torch.tensor(ADVANTAGES)


def test_ppo_clip_with_dual_clip_matches_the_worked_numbers():
    logps, old, advantages = _inputs()
    out = ppo_clip_loss(logps, old, advantages, 0.2, 0.2, dual_clip=3.0)
    assert out.per_token.squeeze(1).tolist() == pytest.approx(WITH_DUAL_CLIP)
    assert out.ratio.squeeze(1).tolist() == pytest.approx(RATIOS)
    assert out.clipped.squeeze(1).tolist() == CLIPPED
    assert out.dual_clipped.squeeze(1).tolist() == DUAL_CLIPPED
    out.per_token.sum().backward()
    assert logps.grad.squeeze(1).tolist() == pytest.approx(GRADIENTS)


def test_without_dual_clip_a_negative_advantage_is_not_capped():
    logps, old, advantages = _inputs()
    out = ppo_clip_loss(logps, old, advantages, 0.2, 0.2, dual_clip=None)
    assert out.per_token.squeeze(1).tolist() == pytest.approx(WITHOUT_DUAL_CLIP)
    assert not out.dual_clipped.any()


def test_clip_higher_widens_only_the_upper_bound():
    logps = torch.tensor([[math.log(1.25)], [math.log(0.75)]])
    out = ppo_clip_loss(logps, torch.zeros(2, 1), torch.tensor([1.0, -1.0]), 0.2, 0.28)
    # rho 1.25 is inside [0.8, 1.28]: l = -1.25; rho 0.75 is below 0.8 with A < 0: l = max(0.75, 0.8) = 0.8
    assert out.per_token.squeeze(1).tolist() == pytest.approx([-1.25, 0.8])
    assert out.clipped.squeeze(1).tolist() == [False, True]


def test_dual_clip_must_exceed_one():
    logps, old, advantages = _inputs()
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(logps, old, advantages, 0.2, 0.2, dual_clip=1.0)


def test_the_kl_estimate_and_its_clamp_match_the_worked_numbers():
    # x = log pi_ref - log pi_theta; k3 = e^x - x - 1
    x = torch.tensor([[3.0, -2.0, 0.0, 0.5]])
    logps = torch.zeros_like(x, requires_grad=True)
    unclamped = [math.exp(3) - 4, math.exp(-2) + 1, 0.0, math.exp(0.5) - 1.5]  # 16.0855, 1.1353, 0, 0.1487
    assert low_var_kl(logps, x).squeeze(0).tolist() == pytest.approx(unclamped)
    clamped = low_var_kl(logps, x, clamp=10.0)
    assert clamped.squeeze(0).tolist() == pytest.approx([10.0, unclamped[1], 0.0, unclamped[3]])
    clamped.sum().backward()
    # d k3 / d log pi_theta = 1 - e^x, and 0 where the clamp is active
    assert logps.grad.squeeze(0).tolist() == pytest.approx([0.0, 1 - math.exp(-2), 0.0, 1 - math.exp(0.5)])


def test_masked_totals_of_token_and_seq_mean():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the last row is padding: it adds nothing
    assert masked_total(per_token, mask, "token_mean").item() == pytest.approx(1 + 2 + 4)
    assert masked_total(per_token, mask, "seq_mean").item() == pytest.approx((1 + 2) / 2 + 4 / 1)
    with pytest.raises(ValueError, match="aggregation"):
        masked_total(per_token, mask, "sum")
