"""Entropy regularisation for the policy loss: a plain bonus, or EPO smoothing.

EPO (Entropy-regularized Policy Optimization, arXiv 2509.22576), the paper's v2
formulation, which is differentiable. With H the per-token entropy of the policy
over the vocabulary (computed with gradient in the update forward pass):

- ``L_H``: a hierarchical mean of H. By default the mean over episodes of (the
  mean over the episode's turns of (the mean over the turn's tokens of H));
  a plain token mean is a switch. See ``row_weights`` / ``weighted_mean``.
- ``H̄``: the cumulative mean (not a sliding window) of the past iterations'
  batch mean token entropy; detached; part of the training state.
- ``P = relu(κ_l·H̄ − H) + relu(H − κ_r·H̄)`` per token, zero inside the band
  [κ_l·H̄, κ_r·H̄]; ``L_smooth`` is the same hierarchical mean of ``α·P``. At the
  first iteration there is no H̄ yet and ``L_smooth = 0``.
- ``β_k = 1 + exp(−γ_β·k/⌊K/2⌋)``, K the total number of iterations.
- ``L = L_policy − λ·(L_H − β_k·L_smooth)``; the part after ``L_policy`` is what
  ``EntropyRegularizer.loss_term`` returns.

Defaults: λ = 1e-3, α = 0.1 (0.05 on ScienceWorld), κ_l = 0, κ_r = 2, γ_β = 3.

Note on the size of the effect: per token, the derivative of the EPO term with
respect to H is ``−λ·w·(1 − α·β_k)`` above the band and ``−λ·w·(1 + α·β_k)``
below it (w the token's weight in the hierarchical mean). Since β_k ≤ 2, with
α = 0.1 the smoothing term only weakens the entropy bonus above the band (by at
most 20 %); it reverses the push (lowers entropy) only when α·β_k > 1. With
κ_l = 0 the lower side never activates.

The released code differs from the paper in four ways; none is reproduced here:

- its penalty is an indicator (entropy outside the band), a comparison with
  zero gradient, so its smoothing term does nothing to the update;
- it keeps a per-turn H̄ vector rather than one scalar;
- it applies smoothing only from turn >= 25;
- it uses a different decay schedule for the phase weight.

Everything here is a pure function of tensors plus one small state object
holding the H̄ history; no model is involved.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from agentrl.algos.segments import factorize

MODES = ("bonus", "epo")
AGGREGATIONS = ("trajectory", "token")
STATE_FORMAT = 1


# ---------------------------------------------------------------------------
# Schedule and penalties.
# ---------------------------------------------------------------------------


def phase_weight(iteration: int, total_iterations: int, gamma_beta: float = 3.0) -> float:
    """``β_k = 1 + exp(−γ_β·k/⌊K/2⌋)``, with ⌊K/2⌋ taken as at least 1.

    β starts at 2 and decays towards 1; at k = ⌊K/2⌋ it is ``1 + exp(−γ_β)``.
    Iterations past K are allowed (β keeps decaying), so a resumed run with a
    longer schedule does not fail.
    """
    if isinstance(iteration, bool) or int(iteration) != iteration or iteration < 0:
        raise ValueError(f"iteration must be an integer >= 0, got {iteration!r}")
    if isinstance(total_iterations, bool) or int(total_iterations) != total_iterations or total_iterations < 1:
        raise ValueError(f"total_iterations (trainer.iterations) must be an integer >= 1, got {total_iterations!r}")
    if not math.isfinite(gamma_beta) or gamma_beta < 0:
        raise ValueError(f"algo.entropy.gamma_beta must be a finite number >= 0, got {gamma_beta!r}")
    half = max(int(total_iterations) // 2, 1)
    return 1.0 + math.exp(-gamma_beta * int(iteration) / half)


def _check_band(h_bar: float, kappa_low: float, kappa_high: float) -> None:
    if not math.isfinite(h_bar):
        raise ValueError(f"h_bar must be finite, got {h_bar!r}")
    if not (0 <= kappa_low <= kappa_high) or not math.isfinite(kappa_high):
        raise ValueError(f"need 0 <= kappa_low <= kappa_high (finite), got {kappa_low!r}, {kappa_high!r}")


def smoothing_penalty(entropy: Tensor, h_bar: float, kappa_low: float = 0.0, kappa_high: float = 2.0) -> Tensor:
    """EPO v2 penalty, elementwise: ``relu(κ_l·H̄ − H) + relu(H − κ_r·H̄)``.

    Zero inside the band [κ_l·H̄, κ_r·H̄] (ends included); outside it, the
    distance to the band, with gradient ∓1 with respect to ``entropy``.
    """
    _check_band(h_bar, kappa_low, kappa_high)
    return torch.relu(kappa_low * h_bar - entropy) + torch.relu(entropy - kappa_high * h_bar)


# ---------------------------------------------------------------------------
# Hierarchical means over rows (one row = one agent turn).
# ---------------------------------------------------------------------------


def row_weights(episode: np.ndarray, num_tokens: np.ndarray, aggregation: str = "trajectory") -> np.ndarray:
    """One float64 weight per row, so that ``Σ_r w_r·(token mean of x over row r)``
    is the requested mean of x over the batch.

    Rows of one episode share an episode id (any integers, any order).

    - ``"trajectory"``: the mean over episodes of (the mean over that episode's
      rows of (the row's token mean)): ``w_r = 1/(E·T_e)``, with E episodes and
      T_e rows in row r's episode.
    - ``"token"``: the plain mean over all completion tokens of the batch:
      ``w_r = n_r/N``.

    Rows with 0 tokens get weight 0 and count neither in T_e nor, when a whole
    episode has no tokens, in E. The weights sum to 1, or are all 0 when the
    batch has no tokens. They are global to the batch, so micro-batches can use
    slices of them (see ``weighted_mean``).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"algo.entropy.aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    episode = np.asarray(episode)
    num_tokens = np.asarray(num_tokens)
    if episode.ndim != 1 or num_tokens.ndim != 1:
        raise ValueError(f"episode and num_tokens must be 1-D, got shapes {episode.shape} and {num_tokens.shape}")
    if episode.shape != num_tokens.shape:
        raise ValueError(f"episode and num_tokens must have equal lengths, got {episode.size} and {num_tokens.size}")
    if episode.size and episode.dtype.kind not in "iu":
        raise ValueError(f"episode must hold integer ids, got dtype {episode.dtype}")
    num_tokens = num_tokens.astype(np.float64)
    if not np.isfinite(num_tokens).all() or (num_tokens < 0).any():
        raise ValueError("num_tokens must be finite and >= 0")

    weights = np.zeros(episode.size, dtype=np.float64)
    active = num_tokens > 0
    if not active.any():
        return weights
    if aggregation == "token":
        weights[active] = num_tokens[active] / num_tokens[active].sum()
        return weights
    codes, num_episodes = factorize(episode[active])
    rows_per_episode = np.bincount(codes, minlength=num_episodes)
    weights[active] = 1.0 / (num_episodes * rows_per_episode[codes])
    return weights


def weighted_mean(per_token: Tensor, mask: Tensor, row_weight: Tensor) -> Tensor:
    """``Σ_r w_r · Σ_t(x·m)/max(n_r, 1)``, a differentiable scalar.

    ``per_token`` and ``mask`` are (B, T) (mask 0/1 or bool; n_r = Σ_t m), and
    ``row_weight`` is (B,), from ``row_weights``. Masked-out positions never
    reach the result, even when they hold NaN or inf. Computed in at least
    float32. Because the weights are global to the batch, the values over row
    slices (micro-batches) of a batch add up to the full-batch value, and so do
    their gradients: add each micro-batch's value to its loss unscaled.
    """
    if per_token.ndim != 2 or mask.shape != per_token.shape:
        raise ValueError(
            f"per_token and mask must both be (B, T), got {tuple(per_token.shape)} and {tuple(mask.shape)}"
        )
    if row_weight.shape != per_token.shape[:1]:
        raise ValueError(f"row_weight must be (B,) = ({per_token.shape[0]},), got {tuple(row_weight.shape)}")
    dtype = torch.promote_types(per_token.dtype, torch.float32)
    m = mask.to(dtype)
    x = torch.where(m != 0, per_token.to(dtype), per_token.new_zeros((), dtype=dtype))
    row_mean = (x * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1)
    return (row_weight.to(device=x.device, dtype=dtype) * row_mean).sum()


# ---------------------------------------------------------------------------
# The regulariser: the loss term plus the H̄ history.
# ---------------------------------------------------------------------------


def _check_hyperparameters(mode, coef, alpha, kappa_low, kappa_high, gamma_beta, total_iterations) -> None:
    if mode not in MODES:
        raise ValueError(
            f"algo.entropy.mode must be one of {', '.join(MODES)} for a regulariser "
            f"(mode 'none' builds none), got {mode!r}"
        )
    for key, value in (("coef", coef), ("alpha", alpha), ("gamma_beta", gamma_beta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"algo.entropy.{key} must be a finite number >= 0, got {value!r}")
    for key, value in (("kappa_low", kappa_low), ("kappa_high", kappa_high)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"algo.entropy.{key} must be a finite number >= 0, got {value!r}")
    if kappa_low > kappa_high:
        raise ValueError(
            f"algo.entropy.kappa_high must be >= algo.entropy.kappa_low, got "
            f"kappa_low={kappa_low!r}, kappa_high={kappa_high!r}"
        )
    if isinstance(total_iterations, bool) or not isinstance(total_iterations, int) or total_iterations < 1:
        raise ValueError(f"total_iterations (trainer.iterations) must be an integer >= 1, got {total_iterations!r}")


class EntropyRegularizer:
    """The entropy term of the loss, and the H̄ history EPO needs.

    - mode ``"bonus"``: ``term = −coef·L_H``.
    - mode ``"epo"``: ``term = −coef·(L_H − β_k·L_smooth)``, with
      ``L_H = weighted_mean(H)`` and ``L_smooth = weighted_mean(α·P(H, H̄))``;
      ``L_smooth = 0`` while the history is empty (iteration 0: no H̄ yet).

    The term is ADDED to the policy loss. Use per iteration: ``loss_term`` once
    per micro-batch (row weights global to the batch, see ``row_weights``; add
    the term unscaled, not divided by the number of accumulation steps), then
    ``end_iteration`` once after the update. Under data parallel training with
    weights global over all ranks and gradients averaged, the trainer has to
    multiply the term by the world size, and pass globally reduced totals
    (``pending_totals`` summed over ranks) to ``end_iteration``.

    The statistics reported by ``end_iteration`` are sums over the calls of the
    iteration, so they are the batch values when each row goes through
    ``loss_term`` once per iteration (one PPO epoch, the reference default).

    The history is kept in both modes (in bonus mode it only feeds the
    ``entropy/h_bar`` metric). ``state_dict`` is taken between iterations; the
    pending accumulators of an unfinished iteration are not saved.
    """

    def __init__(
        self,
        mode: str,
        coef: float = 1e-3,
        alpha: float = 0.1,
        kappa_low: float = 0.0,
        kappa_high: float = 2.0,
        gamma_beta: float = 3.0,
        total_iterations: int = 1,
    ):
        mode = getattr(mode, "value", mode)  # accept the config's EntropyMode enum
        _check_hyperparameters(mode, coef, alpha, kappa_low, kappa_high, gamma_beta, total_iterations)
        self.mode = str(mode)
        self.coef = float(coef)
        self.alpha = float(alpha)
        self.kappa_low = float(kappa_low)
        self.kappa_high = float(kappa_high)
        self.gamma_beta = float(gamma_beta)
        self.total_iterations = int(total_iterations)
        self.history: list[float] = []
        self._reset_accumulators()

    # -- state ----------------------------------------------------------------

    @property
    def h_bar(self) -> float | None:
        """Cumulative mean of the history (a float, detached), or None when empty."""
        if not self.history:
            return None
        return math.fsum(self.history) / len(self.history)

    def discard_iteration(self) -> None:
        """Forget the current iteration's statistics (its update was skipped); the history is unchanged."""
        self._reset_accumulators()

    def _reset_accumulators(self) -> None:
        # Detached tensors, turned into floats only when read, so that a
        # micro-batch costs no device synchronisation.
        self._entropy_sum: Tensor | None = None
        self._token_count: Tensor | None = None
        self._trajectory_mean: Tensor | None = None
        self._smooth_loss: Tensor | None = None
        self._term: Tensor | None = None
        self._beta = math.nan

    @staticmethod
    def _add(total: Tensor | None, value: Tensor) -> Tensor:
        value = value.detach()
        return value if total is None else total + value.to(total.device)

    @staticmethod
    def _float(value: Tensor | None, empty: float) -> float:
        return empty if value is None else float(value.item())

    # -- per micro-batch --------------------------------------------------------

    def loss_term(self, entropy: Tensor, mask: Tensor, row_weight: Tensor, iteration: int) -> Tensor:
        """The scalar to add to the policy loss of this micro-batch.

        ``entropy`` (B, T) per-token entropy with gradient, ``mask`` (B, T)
        completion-token mask, ``row_weight`` (B,) this micro-batch's slice of
        the batch's ``row_weights``, ``iteration`` k (0-based) for β_k.
        """
        trajectory_mean = weighted_mean(entropy, mask, row_weight)
        smooth_loss = trajectory_mean.new_zeros(())
        beta = math.nan
        if self.mode == "epo":
            beta = phase_weight(iteration, self.total_iterations, self.gamma_beta)
            h_bar = self.h_bar
            if h_bar is not None:
                penalty = smoothing_penalty(entropy, h_bar, self.kappa_low, self.kappa_high)
                smooth_loss = weighted_mean(self.alpha * penalty, mask, row_weight)
            term = -self.coef * (trajectory_mean - beta * smooth_loss)
        else:
            if isinstance(iteration, bool) or int(iteration) != iteration or iteration < 0:
                raise ValueError(f"iteration must be an integer >= 0, got {iteration!r}")
            term = -self.coef * trajectory_mean

        m = mask.to(trajectory_mean.dtype)
        valid_entropy = torch.where(m != 0, entropy.detach().to(m.dtype), m.new_zeros(()))
        self._entropy_sum = self._add(self._entropy_sum, (valid_entropy * m).sum())
        self._token_count = self._add(self._token_count, m.sum())
        self._trajectory_mean = self._add(self._trajectory_mean, trajectory_mean)
        self._smooth_loss = self._add(self._smooth_loss, smooth_loss)
        self._term = self._add(self._term, term)
        self._beta = beta
        return term

    def pending_totals(self) -> tuple[float, float]:
        """Local (token-entropy sum, token count) of the current iteration, for reduction."""
        return self._float(self._entropy_sum, 0.0), self._float(self._token_count, 0.0)

    # -- per iteration ------------------------------------------------------------

    def end_iteration(
        self, token_entropy_sum: float | None = None, token_count: float | None = None
    ) -> dict[str, float]:
        """Close the iteration: append its batch mean token entropy to the history.

        The arguments, given together, override the locally accumulated totals
        (a multi-GPU trainer passes globally reduced ones). An iteration with no
        tokens appends nothing. A non-finite mean raises ValueError rather than
        poisoning H̄ for the rest of training. Returns the iteration's metrics;
        values that do not apply are NaN (``entropy/h_bar`` before the first
        H̄, ``entropy/beta`` in bonus mode, the loss statistics when
        ``loss_term`` was never called).
        """
        if (token_entropy_sum is None) != (token_count is None):
            raise ValueError("pass token_entropy_sum and token_count together, or neither")
        if token_entropy_sum is None:
            token_entropy_sum, token_count = self.pending_totals()
        token_entropy_sum, token_count = float(token_entropy_sum), float(token_count)
        if not math.isfinite(token_count) or token_count < 0:
            raise ValueError(f"token_count must be finite and >= 0, got {token_count!r}")

        h_bar_used = self.h_bar
        token_mean = math.nan
        if token_count > 0:
            token_mean = token_entropy_sum / token_count
            if not math.isfinite(token_mean):
                raise ValueError(f"the iteration's mean token entropy is {token_mean}; not adding it to the history")
            self.history.append(token_mean)

        metrics = {
            "entropy/token_mean": token_mean,
            "entropy/h_bar": math.nan if h_bar_used is None else h_bar_used,
            "entropy/trajectory_mean": self._float(self._trajectory_mean, math.nan),
            "entropy/smooth_loss": self._float(self._smooth_loss, math.nan),
            "entropy/beta": self._beta,
            "entropy/term": self._float(self._term, math.nan),
        }
        self._reset_accumulators()
        return metrics

    # -- checkpointing --------------------------------------------------------------

    def state_dict(self) -> dict:
        """JSON-serialisable state: the full history, the mode and the hyperparameters."""
        return {
            "format": STATE_FORMAT,
            "mode": self.mode,
            "coef": self.coef,
            "alpha": self.alpha,
            "kappa_low": self.kappa_low,
            "kappa_high": self.kappa_high,
            "gamma_beta": self.gamma_beta,
            "total_iterations": self.total_iterations,
            "history": list(self.history),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore the history. The mode must match; the other hyperparameters
        come from the current config (they are saved for reference only)."""
        if not isinstance(state, dict) or "history" not in state or "mode" not in state:
            raise ValueError("entropy regulariser state must be a dict with 'mode' and 'history'")
        if state["mode"] != self.mode:
            raise ValueError(
                f"checkpoint was trained with algo.entropy.mode={state['mode']!r}, but the config says {self.mode!r}"
            )
        history = state["history"]
        if not isinstance(history, list) or not all(
            isinstance(h, (int, float)) and not isinstance(h, bool) and math.isfinite(h) for h in history
        ):
            raise ValueError("entropy regulariser state: 'history' must be a list of finite numbers")
        self.history = [float(h) for h in history]
        self._reset_accumulators()
