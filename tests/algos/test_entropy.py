"""EPO / entropy bonus (docs/algorithms.md, "Entropy regularisation"): schedule, penalty, gradients, weights, state."""

import enum
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos.entropy import (
    EntropyRegularizer,
    phase_weight,
    row_weights,
    smoothing_penalty,
    weighted_mean,
)

METRIC_KEYS = {
    "entropy/token_mean",
    "entropy/h_bar",
    "entropy/trajectory_mean",
    "entropy/smooth_loss",
    "entropy/beta",
    "entropy/term",
}


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis, with gradient."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def with_history(reg: EntropyRegularizer, *values: float) -> EntropyRegularizer:
    for v in values:
        reg.end_iteration(token_entropy_sum=v, token_count=1.0)
    return reg


# Hand case: episode 0 has two rows (3 and 1 tokens), episode 1 one row (2 tokens).
EPISODE = np.array([0, 0, 1])
NUM_TOKENS = np.array([3, 1, 2])
X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [5.0, 7.0, 0.0]])  # row means 2, 4, 6
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]])


# ---------------------------------------------------------------------------
# phase_weight
# ---------------------------------------------------------------------------


def test_phase_weight_hand_values():
    assert phase_weight(0, 100) == 2.0
    assert phase_weight(50, 100) == pytest.approx(1 + math.exp(-3), rel=1e-15)
    assert phase_weight(25, 100) == pytest.approx(1 + math.exp(-1.5), rel=1e-15)
    assert phase_weight(10, 21, gamma_beta=1.0) == pytest.approx(1 + math.exp(-1.0), rel=1e-15)  # floor(21/2) = 10
    assert phase_weight(7, 100, gamma_beta=0.0) == 2.0


def test_phase_weight_monotone_decreasing():
    betas = [phase_weight(k, 100) for k in range(101)]
    assert all(a > b for a, b in zip(betas, betas[1:]))
    assert all(1.0 < b <= 2.0 for b in betas)


def test_phase_weight_single_iteration_and_past_the_end():
    assert phase_weight(0, 1) == 2.0  # floor(1/2) = 0 is taken as 1
    assert phase_weight(1, 1) == pytest.approx(1 + math.exp(-3))
    assert phase_weight(200, 100) < phase_weight(100, 100)


@pytest.mark.parametrize("args", [(-1, 10), (1.5, 10), (0, 0), (0, 10, -1.0), (0, 10, math.nan)])
def test_phase_weight_rejects_bad_arguments(args):
    with pytest.raises(ValueError):
        phase_weight(*args)


# ---------------------------------------------------------------------------
# Penalties
# ---------------------------------------------------------------------------


def test_smoothing_penalty_hand_values():
    h = torch.tensor([0.2, 0.5, 1.0, 2.0, 2.5])
    got = smoothing_penalty(h, h_bar=1.0, kappa_low=0.5, kappa_high=2.0)
    torch.testing.assert_close(got, torch.tensor([0.3, 0.0, 0.0, 0.0, 0.5]))


def test_smoothing_penalty_defaults_zero_inside_band():
    h = torch.tensor([0.0, 0.7, 1.4, 1.41, 3.0])
    got = smoothing_penalty(h, h_bar=0.7)  # band [0, 1.4]
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, 0.0, 0.01, 1.6]))


def test_penalties_reject_inverted_band():
    with pytest.raises(ValueError):
        smoothing_penalty(torch.ones(2), 1.0, kappa_low=2.0, kappa_high=1.0)
    with pytest.raises(ValueError):
        smoothing_penalty(torch.ones(2), math.nan)


# ---------------------------------------------------------------------------
# Gradients (entropy computed from logits that require grad)
# ---------------------------------------------------------------------------


def _logits() -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    # Near-uniform over 5 tokens: H close to ln 5 = 1.61 everywhere.
    return (0.1 * torch.randn(2, 3, 5, generator=gen)).requires_grad_(True)


MASK_G = torch.tensor([[1, 1, 0], [1, 1, 1]])
WEIGHT_G = torch.tensor([0.5, 0.5])


def _grad(loss: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(loss, logits)
    return g


def _bonus_grad(coef: float = 1e-3) -> torch.Tensor:
    logits = _logits()
    return _grad(EntropyRegularizer("bonus", coef=coef).loss_term(token_entropy(logits), MASK_G, WEIGHT_G, 0), logits)


def _lowers_entropy(loss_grad: torch.Tensor, logits: torch.Tensor) -> bool:
    with torch.no_grad():
        before = token_entropy(logits)[MASK_G.bool()]
        after = token_entropy(logits - 1.0 * loss_grad / loss_grad.norm())[MASK_G.bool()]
    return bool((after < before).all())


def test_smoothing_part_pushes_entropy_down_when_above_band():
    logits = _logits()
    h = token_entropy(logits)
    assert (h > 2 * 0.5).all()  # H-bar 0.5: above the band everywhere
    loss = weighted_mean(0.1 * smoothing_penalty(h, h_bar=0.5), MASK_G, WEIGHT_G)
    g = _grad(loss, logits)
    assert g.abs().sum() > 0
    assert _lowers_entropy(g, logits)


def test_epo_term_gradient_is_active_above_band():
    logits = _logits()
    reg = with_history(EntropyRegularizer("epo", coef=1e-3, alpha=1.0, total_iterations=10), 0.5)
    g = _grad(reg.loss_term(token_entropy(logits), MASK_G, WEIGHT_G, iteration=1), logits)
    assert g.abs().sum() > 0
    # alpha * beta_1 = 1 + exp(-0.6) > 1: the smoothing outweighs the bonus, so descent lowers H.
    assert _lowers_entropy(g, logits)
    # The bonus alone raises it.
    assert not _lowers_entropy(_bonus_grad(), _logits())


def test_epo_term_with_paper_alpha_scales_the_bonus_above_band():
    # d term / dH = -coef * w * (1 - alpha * beta) above the band: alpha = 0.1 only weakens the bonus.
    logits = _logits()
    reg = with_history(EntropyRegularizer("epo", coef=1e-3, alpha=0.1, total_iterations=10), 0.5)
    g = _grad(reg.loss_term(token_entropy(logits), MASK_G, WEIGHT_G, iteration=1), logits)
    beta = phase_weight(1, 10)
    torch.testing.assert_close(g, (1 - 0.1 * beta) * _bonus_grad(), rtol=1e-5, atol=1e-12)


def test_inside_band_only_the_bonus_acts():
    logits = _logits()
    h = token_entropy(logits)
    assert (h < 2 * 1.0).all()  # H-bar 1.0: band [0, 2]
    smooth = weighted_mean(0.1 * smoothing_penalty(h, h_bar=1.0), MASK_G, WEIGHT_G)
    assert smooth.item() == 0.0
    assert _grad(smooth, logits).abs().sum() == 0

    logits = _logits()
    reg = with_history(EntropyRegularizer("epo", coef=1e-3, total_iterations=10), 1.0)
    g = _grad(reg.loss_term(token_entropy(logits), MASK_G, WEIGHT_G, iteration=1), logits)
    torch.testing.assert_close(g, _bonus_grad(), rtol=0, atol=0)
    assert not _lowers_entropy(g, logits)  # the bonus raises entropy


# ---------------------------------------------------------------------------
# row_weights and weighted_mean
# ---------------------------------------------------------------------------


def test_row_weights_trajectory_hand_case():
    w = row_weights(EPISODE, NUM_TOKENS, "trajectory")
    np.testing.assert_allclose(w, [0.25, 0.25, 0.5], rtol=0, atol=1e-15)
    # episode 0: mean(2, 4) = 3; episode 1: 6; mean over episodes 4.5
    assert weighted_mean(X, MASK, torch.from_numpy(w)).item() == pytest.approx(4.5)


def test_row_weights_token_hand_case():
    w = row_weights(EPISODE, NUM_TOKENS, "token")
    np.testing.assert_allclose(w, [3 / 6, 1 / 6, 2 / 6], rtol=1e-15)
    assert weighted_mean(X, MASK, torch.from_numpy(w)).item() == pytest.approx(22 / 6)


def test_row_weights_empty_rows_are_excluded():
    w = row_weights(np.array([0, 0, 1, 2]), np.array([3, 0, 2, 0]), "trajectory")
    np.testing.assert_allclose(w, [0.5, 0.0, 0.5, 0.0])  # E = 2, T_0 = 1
    np.testing.assert_array_equal(row_weights(np.array([4, 5]), np.array([0, 0])), [0.0, 0.0])
    assert row_weights(np.array([], dtype=int), np.array([], dtype=int)).shape == (0,)


def test_row_weights_rejects_bad_input():
    with pytest.raises(ValueError, match="aggregation"):
        row_weights(EPISODE, NUM_TOKENS, "sequence")
    with pytest.raises(ValueError):
        row_weights(EPISODE, NUM_TOKENS[:2])
    with pytest.raises(ValueError):
        row_weights(EPISODE, np.array([3, -1, 2]))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=12))
def test_row_weights_trajectory_matches_direct_mean(rows):
    episode = np.array([e for e, _ in rows])
    tokens = np.array([n for _, n in rows])
    value = np.arange(len(rows), dtype=np.float64) + 1.0  # row token-means
    w = row_weights(episode, tokens, "trajectory")
    per_episode = {}
    for e, n, v in zip(episode, tokens, value):
        if n > 0:
            per_episode.setdefault(e, []).append(v)
    if not per_episode:
        assert (w == 0).all()
        return
    expected = np.mean([np.mean(vs) for vs in per_episode.values()])
    assert w.sum() == pytest.approx(1.0)
    assert float(w @ value) == pytest.approx(expected)


def test_weighted_mean_micro_batches_add_up():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 5, generator=gen, dtype=torch.float64).requires_grad_(True)
    mask = (torch.rand(6, 5, generator=gen) > 0.3).long()
    mask[4] = 0  # a row without tokens
    w = torch.from_numpy(row_weights(np.array([0, 0, 1, 2, 2, 2]), mask.sum(1).numpy()))
    full = weighted_mean(x, mask, w)
    (g_full,) = torch.autograd.grad(full, x)
    parts = [weighted_mean(x[a:b], mask[a:b], w[a:b]) for a, b in ((0, 2), (2, 5), (5, 6))]
    total = sum(parts)
    (g_parts,) = torch.autograd.grad(total, x)
    torch.testing.assert_close(total, full, rtol=1e-14, atol=0)
    torch.testing.assert_close(g_parts, g_full, rtol=1e-14, atol=0)


def test_weighted_mean_ignores_masked_nan():
    x = X.clone()
    x[1, 1:] = math.nan
    w = torch.from_numpy(row_weights(EPISODE, NUM_TOKENS))
    assert weighted_mean(x, MASK, w).item() == pytest.approx(4.5)
    with pytest.raises(ValueError):
        weighted_mean(X, MASK[:2], w)


# ---------------------------------------------------------------------------
# EntropyRegularizer
# ---------------------------------------------------------------------------


def test_history_is_a_cumulative_mean():
    reg = EntropyRegularizer("epo", total_iterations=10)
    assert reg.h_bar is None
    h_bars = []
    for s, n in ((1.0, 1), (3.0, 1), (4.0, 2), (10.0, 5)):
        h_bars.append(reg.end_iteration(token_entropy_sum=s, token_count=n)["entropy/h_bar"])
    assert reg.history == [1.0, 3.0, 2.0, 2.0]
    assert reg.h_bar == 2.0
    assert math.isnan(h_bars[0]) and h_bars[1:] == [1.0, 2.0, 2.0]


def test_local_totals_and_token_mean():
    reg = EntropyRegularizer("epo", total_iterations=10)
    w = torch.from_numpy(row_weights(EPISODE, NUM_TOKENS))
    reg.loss_term(X[:2], MASK[:2], w[:2], 0)
    reg.loss_term(X[2:], MASK[2:], w[2:], 0)
    assert reg.pending_totals() == (22.0, 6.0)
    m = reg.end_iteration()
    assert set(m) == METRIC_KEYS
    assert m["entropy/token_mean"] == pytest.approx(22 / 6)
    assert m["entropy/trajectory_mean"] == pytest.approx(4.5)  # summed over micro-batches
    assert reg.history == [pytest.approx(22 / 6)]
    assert reg.pending_totals() == (0.0, 0.0)


def test_smooth_loss_is_zero_at_first_iteration_then_hand_value():
    coef = 1e-3
    reg = EntropyRegularizer("epo", coef=coef, total_iterations=10)
    h = torch.tensor([[3.0, 1.0]])
    mask, w = torch.ones(1, 2), torch.ones(1)
    term = reg.loss_term(h, mask, w, iteration=0)
    assert term.item() == pytest.approx(-coef * 2.0)
    m = reg.end_iteration(token_entropy_sum=1.0, token_count=1.0)  # H-bar becomes 1: band [0, 2]
    assert m["entropy/smooth_loss"] == 0.0 and m["entropy/beta"] == 2.0 and math.isnan(m["entropy/h_bar"])

    term = reg.loss_term(h, mask, w, iteration=5)  # penalty [1, 0] -> L_smooth = 0.1 * 0.5
    beta = 1 + math.exp(-3)
    assert term.item() == pytest.approx(-coef * (2.0 - beta * 0.05))
    m = reg.end_iteration()
    assert m["entropy/smooth_loss"] == pytest.approx(0.05)
    assert m["entropy/beta"] == pytest.approx(beta)
    assert m["entropy/h_bar"] == 1.0
    assert m["entropy/term"] == pytest.approx(term.item())
    assert m["entropy/token_mean"] == pytest.approx(2.0)


def test_bonus_mode_is_minus_coef_times_l_h():
    reg = with_history(EntropyRegularizer("bonus", coef=0.01, total_iterations=10), 0.1)
    w = torch.from_numpy(row_weights(EPISODE, NUM_TOKENS))
    term = reg.loss_term(X, MASK, w, iteration=3)
    assert term.item() == pytest.approx(-0.01 * 4.5)
    m = reg.end_iteration()
    assert set(m) == METRIC_KEYS
    assert m["entropy/smooth_loss"] == 0.0 and math.isnan(m["entropy/beta"])


def test_end_iteration_edge_cases():
    reg = EntropyRegularizer("epo")
    m = reg.end_iteration()  # nothing happened: nothing appended
    assert reg.history == [] and all(math.isnan(v) for v in m.values())
    with pytest.raises(ValueError, match="together"):
        reg.end_iteration(token_entropy_sum=1.0)
    with pytest.raises(ValueError):
        reg.end_iteration(token_entropy_sum=math.nan, token_count=2.0)
    assert reg.history == []


def test_state_dict_round_trip_continues_identically():
    w = torch.from_numpy(row_weights(EPISODE, NUM_TOKENS))

    def run(reg, k):
        term = reg.loss_term(X * (0.1 + 0.05 * k), MASK, w, iteration=k)
        return term.item(), reg.end_iteration()

    a = EntropyRegularizer("epo", coef=1e-3, alpha=0.1, total_iterations=6)
    for k in range(3):
        run(a, k)
    b = EntropyRegularizer("epo", coef=1e-3, alpha=0.1, total_iterations=6)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.h_bar == a.h_bar and b.history == a.history
    for k in range(3, 6):
        ta, ma = run(a, k)
        tb, mb = run(b, k)
        assert ta == tb and ma == mb
    assert ma["entropy/smooth_loss"] > 0  # the restored H-bar is in use


def test_accepts_config_enum_mode():
    class EntropyMode(str, enum.Enum):  # as in agentrl.config.values
        epo = "epo"

    reg = EntropyRegularizer(EntropyMode.epo)
    assert reg.mode == "epo" and type(reg.mode) is str
    assert json.loads(json.dumps(reg.state_dict()))["mode"] == "epo"


def test_load_state_dict_rejects_mode_mismatch_and_bad_history():
    state = with_history(EntropyRegularizer("epo"), 1.0).state_dict()
    with pytest.raises(ValueError, match="mode"):
        EntropyRegularizer("bonus").load_state_dict(state)
    with pytest.raises(ValueError, match="history"):
        EntropyRegularizer("epo").load_state_dict({**state, "history": [1.0, None]})


@pytest.mark.parametrize(
    "kwargs, key",
    [
        (dict(mode="none"), "algo.entropy.mode"),
        (dict(coef=-1e-3), "algo.entropy.coef"),
        (dict(alpha=-0.1), "algo.entropy.alpha"),
        (dict(kappa_low=-0.5), "algo.entropy.kappa_low"),
        (dict(kappa_low=3.0, kappa_high=2.0), "algo.entropy.kappa_high"),
        (dict(gamma_beta=math.inf), "algo.entropy.gamma_beta"),
        (dict(total_iterations=0), "trainer.iterations"),
    ],
)
def test_constructor_validates_with_config_key(kwargs, key):
    kwargs = {"mode": "epo", **kwargs}
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        EntropyRegularizer(**kwargs)
