"""AReaL's decoupled-PPO behaviour weight, its metrics' totals and the health line, against numbers by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from agentrl.algos.off_policy import (
    add_totals,
    behaviour_weights,
    correction_metrics,
    correction_totals,
    reduce_totals,
)
from agentrl.algos.policy_loss import masked_total, ppo_clip_loss
from agentrl.health import OFF_POLICY_CAPPED, capped_warning


def _logps(weights: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Proximal and behaviour log-probs (float64) whose ratio pi_prox / pi_behav is `weights`."""
    behaviour = -torch.rand(
        len(weights), len(weights[0]), dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    return behaviour + torch.tensor(weights, dtype=torch.float64).log(), behaviour


def test_equal_logps_give_weight_one_and_nothing_capped():
    logps = torch.tensor([[-0.3, -2.0, -7.5], [-1.0, -0.1, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    weights, kept = behaviour_weights(logps, logps.clone(), mask, cap=5.0)
    assert weights.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    assert kept.tolist() == mask.bool().tolist()
    metrics = correction_metrics(correction_totals(weights, kept, mask))
    assert metrics == {
        "off_policy/capped_share": 0.0,
        "off_policy/weight_mean": 1.0,
        "off_policy/weight_std": 0.0,
        "off_policy/weight_max": 1.0,
    }


def test_weights_by_hand_and_the_cap_masks_rather_than_truncates():
    # w = pi_prox / pi_behav per token; cap 4: 4 itself is kept (AReaL: w <= cap), 6 and 40 are dropped to 0, not
    # truncated to 4 (as SkyRL's TIS and TRL's *_truncate would)
    proximal, behaviour = _logps([[2.0, 0.5, 4.0], [6.0, 0.25, 40.0]])
    mask = torch.ones(2, 3)
    weights, kept = behaviour_weights(proximal, behaviour, mask, cap=4.0)
    assert weights.flatten().tolist() == pytest.approx([2.0, 0.5, 4.0, 0.0, 0.25, 0.0])
    assert kept.tolist() == [[True, True, True], [False, True, False]]
    uncapped, all_kept = behaviour_weights(proximal, behaviour, mask, cap=None)
    assert uncapped.flatten().tolist() == pytest.approx([2.0, 0.5, 4.0, 6.0, 0.25, 40.0])
    assert all_kept.all()
    metrics = correction_metrics(correction_totals(weights, kept, mask))
    kept_weights = torch.tensor([2.0, 0.5, 4.0, 0.25], dtype=torch.float64)
    assert metrics["off_policy/capped_share"] == pytest.approx(2 / 6)
    assert metrics["off_policy/weight_mean"] == pytest.approx(6.75 / 4)
    assert metrics["off_policy/weight_std"] == pytest.approx(float(kept_weights.std(unbiased=False)))
    assert metrics["off_policy/weight_max"] == pytest.approx(4.0)


def _areal_decoupled_loss(logprobs, proximal, behaviour, advantages, eps, mask, c_clip, cap):
    """AReaL's ppo_actor_loss_fn (areal/utils/functional.py lines 276-321 at 79b742c), token level, restated."""
    count = mask.count_nonzero() or 1
    ratio = torch.where(mask, torch.exp(logprobs - proximal), 0)
    loss1, loss2 = -advantages * ratio, -advantages * torch.clamp(ratio, 1 - eps, 1 + eps)
    loss = torch.minimum(torch.maximum(loss1, loss2), torch.sign(advantages) * c_clip * advantages)
    weight = (proximal - behaviour).exp()
    keep = (weight <= cap) & mask
    loss = loss * torch.where(keep, weight, 0.0)
    return torch.where(mask, loss, 0).sum() / count


def test_the_weighted_ppo_loss_equals_areal_value_and_gradient():
    torch.manual_seed(1)
    shape = (4, 6)
    mask = torch.ones(shape, dtype=torch.bool)
    mask[2, 4:] = False
    mask[3, 1:] = False
    proximal = -torch.rand(shape) * 2
    behaviour = proximal - torch.randn(shape) * 1.5  # weights from about 0.01 to 100: several above the cap
    advantages = torch.tensor([1.0, -1.0, 0.5, -2.0]).unsqueeze(1).expand(shape)
    theta = (proximal + torch.randn(shape) * 0.3).requires_grad_(True)

    weights, kept = behaviour_weights(proximal, behaviour, mask, cap=5.0)
    assert (~kept & mask).any() and kept.any()  # the cap binds somewhere
    ours = ppo_clip_loss(theta, proximal, advantages[:, 0], 0.2, 0.2, dual_clip=3.0).per_token * weights
    ours = masked_total(ours, mask, "token_mean") / mask.sum()  # the normaliser counts the capped tokens too
    (grad_ours,) = torch.autograd.grad(ours, theta)

    theirs = _areal_decoupled_loss(theta, proximal, behaviour, advantages, 0.2, mask, 3.0, 5.0)
    (grad_theirs,) = torch.autograd.grad(theirs, theta)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    assert torch.allclose(grad_ours, grad_theirs, atol=1e-7)
    assert (grad_ours[~kept] == 0).all()


def test_padding_is_ignored_whatever_it_holds():
    proximal = torch.tensor([[-1.0, float("nan"), 0.0], [-0.5, -0.5, float("inf")]])
    behaviour = torch.tensor([[-1.0 - math.log(2), 3.0, -50.0], [-0.5, float("-inf"), -1.0]])
    mask = torch.tensor([[1, 0, 0], [1, 0, 0]])
    weights, kept = behaviour_weights(proximal, behaviour, mask, cap=5.0)
    assert weights.flatten().tolist() == pytest.approx([2.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    assert kept.tolist() == [[True, False, False], [True, False, False]]
    assert torch.isfinite(weights).all()
    totals = correction_totals(weights, kept, mask)
    assert totals[:2].tolist() == [2.0, 2.0]  # two real tokens, both kept: padding is neither
    assert correction_metrics(totals)["off_policy/capped_share"] == 0.0
    assert correction_metrics(totals)["off_policy/weight_mean"] == pytest.approx(1.5)


def test_a_missing_behaviour_logp_fails_the_cap_as_in_areal():
    proximal = torch.tensor([[-1.0, -1.0]])
    behaviour = torch.tensor([[-1.0, float("nan")]])
    weights, kept = behaviour_weights(proximal, behaviour, torch.ones(1, 2), cap=5.0)
    assert weights.tolist() == [[1.0, 0.0]]
    assert kept.tolist() == [[True, False]]


def test_a_cap_of_one_or_less_is_refused():
    logps = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="> 1"):
        behaviour_weights(logps, logps, torch.ones(1, 2), cap=1.0)


class _TwoRanks:
    """A fake accelerator whose other rank holds `other`: gather stacks the two ranks' rows."""

    device = torch.device("cpu")
    num_processes = 2

    def __init__(self, other: torch.Tensor):
        self.other = other

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.cat([tensor, self.other[None]])


def test_totals_of_micro_batches_and_ranks_reduce_to_the_whole_batchs_metrics():
    torch.manual_seed(2)
    proximal = -torch.rand(6, 5, dtype=torch.float64)
    behaviour = proximal - 2 * torch.randn(6, 5, dtype=torch.float64)
    mask = (torch.rand(6, 5) > 0.3).long()
    mask[5] = 0  # a padding row
    weights, kept = behaviour_weights(proximal, behaviour, mask, cap=3.0)
    assert (~kept & mask.bool()).any()

    # two micro-batches of unequal size on this rank, one more on the other rank
    micro = [slice(0, 1), slice(1, 4)]
    total = None
    for rows in micro:
        total = add_totals(total, correction_totals(weights[rows], kept[rows], mask[rows]))
    other = correction_totals(weights[4:], kept[4:], mask[4:])
    reduced = reduce_totals(total, _TwoRanks(other))
    metrics = correction_metrics(reduced)

    real, keep = mask.bool(), kept
    expected_w = weights[keep]
    assert metrics["off_policy/capped_share"] == pytest.approx(float((real & ~keep).sum() / real.sum()))
    assert metrics["off_policy/weight_mean"] == pytest.approx(float(expected_w.mean()))
    assert metrics["off_policy/weight_std"] == pytest.approx(float(expected_w.std(unbiased=False)))
    assert metrics["off_policy/weight_max"] == pytest.approx(float(expected_w.max()))
    # and the mean of the micro-batches' means would be wrong: the sums are what add up
    means = [float(weights[r][kept[r]].mean()) for r in (slice(0, 1), slice(1, 4), slice(4, 6))]
    assert sum(means) / len(means) != pytest.approx(metrics["off_policy/weight_mean"])


def test_one_rank_and_no_tokens():
    one = SimpleNamespace(device=torch.device("cpu"), num_processes=1)
    assert correction_metrics(reduce_totals(None, one)) == {}
    weights, kept = behaviour_weights(torch.zeros(1, 2), torch.full((1, 2), -5.0), torch.ones(1, 2), cap=2.0)
    assert correction_metrics(reduce_totals(correction_totals(weights, kept, torch.ones(1, 2)), one)) == {
        "off_policy/capped_share": 1.0
    }


def test_health_line_at_and_above_the_threshold_and_not_below():
    line = capped_warning(12, 0.62, threshold=0.5, cap=5.0)
    assert line is not None and line.startswith(f"{OFF_POLICY_CAPPED}: at iteration 12")
    assert "62%" in line and "rollout.max_staleness" in line and "algo.off_policy.weight_cap" in line
    assert capped_warning(12, 0.5, threshold=0.5) is not None
    assert capped_warning(12, 0.49, threshold=0.5) is None
    assert capped_warning(12, 0.3, threshold=0.2) is not None  # the threshold, not a constant, decides
    assert capped_warning(12, None) is None
