"""Advantage estimators over step rows: pure numpy, vectorised, float64.

One row is one agent turn. Rows carry integer ids (``group``, ``episode``,
``step``), the environment reward of that step and whether an action was parsed.
Ids need not be contiguous and rows may come in any order; ids are factorised
and every per-group or per-episode quantity is a ``np.bincount``
(``agentrl/algos/segments.py``), so the cost is one argsort of the rows by
(episode, step) and a few linear passes. GiGPO's step groups are built in
``agentrl/algos/step_groups.py``.

Estimators: ``grpo`` (episode level), ``gigpo`` (episode level plus step level
over anchor-state groups) and ``rloo``. ``discounted_returns``,
``step_group_sizes`` and ``step_group_metrics`` expose GiGPO's parts for
logging.

The semantics are those of docs/algorithms.md ("GRPO (episode level)" and
"GiGPO"). Deviations from the reference code (verl-agent) are stated
at each function. The one that applies everywhere: the reference computes in
float32, where a group whose scores are equal but not representable (all 9.9,
say) gets advantages of order 0.5 with eps = 1e-6. Here the arithmetic is
float64 and the group statistics are taken on values shifted by one member of
the group, so a group of equal values gets advantages of exactly 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

# Re-exported: part of the public API (``factorize``, ``segment_stats``, ``step_group_sizes``, ``step_group_metrics``).
from agentrl.algos.segments import (  # noqa: F401
    SegmentStats,
    _check_lengths,
    _int_array,
    _step_order,
    factorize,
    segment_stats,
)
from agentrl.algos.step_groups import (  # noqa: F401
    STEP_GROUP_METRICS,
    _anchor_keys,
    _check_similarity,
    _step_groups,
    step_group_codes,
    step_group_metrics,
    step_group_sizes,
)

__all__ = [
    "grpo",
    "gigpo",
    "rloo",
    "episode_returns",
    "discounted_returns",
    "step_group_sizes",
    "step_group_codes",
    "step_group_metrics",
    "STEP_GROUP_METRICS",
    "factorize",
    "segment_stats",
    "SegmentStats",
    "NORMS",
    "EPISODE_STATS",
]

NORMS = ("std", "none")
EPISODE_STATS = ("rows", "episodes")


# ---------------------------------------------------------------------------
# Input checking and the quantities every episode-level estimator shares.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rows:
    group: np.ndarray  # (B,) dense group code per row
    episode: np.ndarray  # (B,) dense episode code per row
    episode_group: np.ndarray  # (E,) group code per episode
    num_groups: int
    num_episodes: int
    returns: np.ndarray  # (E,) R(tau), before any penalty
    penalty: np.ndarray  # (B,) c * invalid
    reward: np.ndarray  # (B,) float64 step reward
    order: np.ndarray  # (B,) row indices sorted by (episode, step)


def _rows(group, episode, step, reward, valid, invalid_penalty: float) -> _Rows | None:
    """Validate and factorise; None for empty input.

    Episode returns are summed in step order, so they do not depend on the
    order rows come in: two episodes with the same rewards get the same return
    to the last bit, and then exactly 0 advantage between them.
    """
    if not np.isfinite(invalid_penalty) or invalid_penalty < 0:
        raise ValueError(f"invalid_penalty must be a finite number >= 0, got {invalid_penalty}")
    group, episode, step = (_int_array(n, x) for n, x in (("group", group), ("episode", episode), ("step", step)))
    reward, valid = np.asarray(reward), np.asarray(valid)
    for name, a in (("reward", reward), ("valid", valid)):
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    n = _check_lengths(group=group, episode=episode, step=step, reward=reward, valid=valid)
    if n == 0:
        return None

    reward = reward.astype(np.float64)
    if not np.isfinite(reward).all():
        raise ValueError("reward holds NaN or inf")
    if valid.dtype != np.bool_:
        if not np.isin(valid, (0, 1)).all():
            raise ValueError(f"valid must be bool (or 0/1), got dtype {valid.dtype}")
        valid = valid.astype(bool)

    g, num_groups = factorize(group)
    e, num_episodes = factorize(episode)
    episode_group = np.empty(num_episodes, dtype=np.intp)
    episode_group[e] = g
    if not np.array_equal(episode_group[e], g):
        raise ValueError("an episode id appears in more than one group; episode ids must be unique across groups")
    order = _step_order(e, step)

    return _Rows(
        group=g,
        episode=e,
        episode_group=episode_group,
        num_groups=num_groups,
        num_episodes=num_episodes,
        returns=np.bincount(e[order], weights=reward[order], minlength=num_episodes),
        penalty=invalid_penalty * (~valid),
        reward=reward,
        order=order,
    )


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(choices)}")


# ---------------------------------------------------------------------------
# Estimators.
# ---------------------------------------------------------------------------


def episode_returns(episode, reward) -> np.ndarray:
    """R(tau) of each row's episode: the sum of the episode's step rewards."""
    episode = _int_array("episode", episode)
    reward = np.asarray(reward, dtype=np.float64)
    _check_lengths(episode=episode, reward=reward)
    if episode.size == 0:
        return np.zeros(0)
    e, num_episodes = factorize(episode)
    return np.bincount(e, weights=reward, minlength=num_episodes)[e]


def grpo(
    group,
    episode,
    step,
    reward,
    valid,
    *,
    norm: str = "std",
    episode_stats: str = "rows",
    invalid_penalty: float = 0.1,
    eps: float = 1e-6,
) -> np.ndarray:
    """Episode-level GRPO advantages for multi-turn agents, one per row.

    Row score ``s_i = R(tau of row i) - invalid_penalty * (not valid_i)``, where
    R is the sum of the episode's step rewards. Then ``A_i = s_i - mu_g`` for
    ``norm="none"`` and ``A_i = (s_i - mu_g) / (sigma_g + eps)`` for
    ``norm="std"``, with sigma the unbiased std (ddof=1).

    ``episode_stats`` picks what mu_g and sigma_g are taken over:

    - ``"rows"`` (reference, verl-agent's ``compute_mean_std_cross_steps=True``):
      the scores of all rows of the group, so longer episodes weigh more and the
      invalid penalty enters the statistics.
    - ``"episodes"`` (GiGPO paper Eq. 3): the N episode returns R(tau) of the
      group, each counted once and *without* the invalid penalty. The penalty
      still lowers the row's own score ``s_i``. The paper has no invalid penalty,
      so this is how agentrl combines the two.

    A group with a single row (``"rows"``) or a single episode (``"episodes"``)
    has mu = 0 and sigma = 1, so ``A_i = s_i``, as in the reference.

    ``step`` only orders the sum of an episode's rewards, so the result does
    not depend on the order rows come in, and rejects duplicated (episode, step)
    rows, which would double an episode's return. Episode ids must be unique
    across groups. Empty input gives an empty array.
    """
    _check_normalisation(norm, episode_stats, eps)
    rows = _rows(group, episode, step, reward, valid, invalid_penalty)
    if rows is None:
        return np.zeros(0)
    return _grpo(rows, norm, episode_stats, eps)


def _check_normalisation(norm: str, episode_stats: str, eps: float) -> None:
    _check_choice("norm", norm, NORMS)
    _check_choice("episode_stats", episode_stats, EPISODE_STATS)
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite number > 0, got {eps}")


def _grpo(rows: _Rows, norm: str, episode_stats: str, eps: float) -> np.ndarray:
    """``grpo`` on validated rows; ``gigpo`` reuses it as its episode level."""
    if episode_stats == "rows":
        score = rows.returns[rows.episode] - rows.penalty
        stats = segment_stats(rows.group, score, rows.num_groups)
        centered = stats.centered
    else:
        stats = segment_stats(rows.episode_group, rows.returns, rows.num_groups)
        centered = stats.centered[rows.episode] - rows.penalty
        score = rows.returns[rows.episode] - rows.penalty

    if norm == "std":
        centered = centered / (stats.std[rows.group] + eps)
    # Single-member groups: mu = 0, sigma = 1.
    return np.where(stats.count[rows.group] > 1, centered, score)


def rloo(
    group, episode, step, reward, valid, *, episode_stats: str = "rows", invalid_penalty: float = 0.1
) -> np.ndarray:
    """RLOO (leave-one-out) advantages, one per row, no std normalisation; ``s_i`` is ``grpo``'s row score.

    - ``"rows"`` (default; verl-agent's ``compute_rloo_outcome_advantage`` with
      ``compute_mean_std_cross_steps=True``): the samples are the n_g rows of the group,
      ``A_i = s_i - sum_{j in g, j != i} s_j / (n_g - 1) = (s_i - mean_g(s)) * n_g / (n_g - 1)``,
      so a row's own episode is in its baseline: A (3 rows, R = 10), B (1 row, R = 0) give [3.33]*3 + [-10].
    - ``"episodes"`` (a deviation: the paper's RLOO, one episode one sample; the reference's
      ``cross_steps=False`` takes each episode's first row's penalised score instead): the N_g
      returns, each once and unpenalised; the penalty lowers the row's own value only,
      ``A_i = R(tau_e(i)) - sum_{e' != e(i)} R(tau_e') / (N_g - 1) - c * (not valid_i)``:
      [10, 10, 10, -10] above. A group of one member (one row, or one episode) has baseline 0,
      so ``A_i = s_i``, as in the reference. Input rules as in ``grpo``.
    """
    _check_choice("episode_stats", episode_stats, EPISODE_STATS)
    rows = _rows(group, episode, step, reward, valid, invalid_penalty)
    if rows is None:
        return np.zeros(0)
    score = rows.returns[rows.episode] - rows.penalty
    if episode_stats == "rows":
        stats = segment_stats(rows.group, score, rows.num_groups)
        centered, own_penalty = stats.centered, 0.0
    else:
        stats = segment_stats(rows.episode_group, rows.returns, rows.num_groups)
        centered, own_penalty = stats.centered[rows.episode], rows.penalty
    n = stats.count[rows.group]
    loo = centered * n / np.maximum(n - 1, 1) - own_penalty  # x_i - mean(others) = (x_i - mean) * n / (n - 1)
    return np.where(n > 1, loo, score)


# ---------------------------------------------------------------------------
# GiGPO: episode level (GRPO) plus step level over anchor-state groups.
# ---------------------------------------------------------------------------


def gigpo(
    group,
    episode,
    step,
    reward,
    valid,
    anchor: Sequence[Hashable],
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    norm: str = "std",
    episode_stats: str = "rows",
    invalid_penalty: float = 0.1,
    eps: float = 1e-6,
    similarity: float | None = None,
    step_group: np.ndarray | None = None,
) -> np.ndarray:
    """GiGPO advantages (arXiv 2505.10978), one per row: ``A_i = A^E_i + step_weight * A^S_i``.

    ``A^E`` is ``grpo`` with the same ``norm``, ``episode_stats``,
    ``invalid_penalty`` and ``eps``. ``A^S`` is relative within a step group:

    - step return ``R_i = sum_{k>=t} gamma^(k-t) r_k`` over the row's episode,
      in ``step`` order (``discounted_returns``), on the rewards before the
      invalid penalty; then ``invalid_penalty * (not valid_i)`` is subtracted
      from the row's own return only;
    - step groups: rows of one ``group`` with equal ``anchor`` keys (equal as
      Python dict keys, so ``1 == 1.0``); keys never match across groups.
      With ``similarity`` (a threshold in (0, 1), string anchors only) the
      reference's greedy clustering is used instead, see ``step_group_sizes``;
    - ``A^S_i = R_i - mu_s`` (``norm="none"``) or ``(R_i - mu_s) / (sigma_s + eps)``
      (``norm="std"``, sigma unbiased); a step group of one row gets exactly 0.

    ``norm="none"`` is the reference's ``mean_norm`` and ``norm="std"`` its
    ``mean_std_norm``. Deviations from verl-agent's ``core_gigpo.py``:

    - float64 (the reference's step returns and statistics are float32), so a
      step group of equal returns gets exactly 0;
    - the reference discounts in batch order and clusters in batch order; here
      both follow (episode, step) order, so the result does not depend on the
      order rows come in. It matches the reference when the batch is
      episode-major with episode ids increasing and steps in order, which is how
      the reference gathers its rollouts.

    ``anchor`` holds one hashable key per row (str, int, tuple; a 1-D numpy
    array works too). Empty input gives an empty array.

    ``step_group`` optionally gives the rows' step-group codes, as
    ``step_group_codes`` computes them from the same rows, anchors and
    ``similarity``; a caller that also logs the step-group sizes then groups
    the rows once.
    """
    _check_normalisation(norm, episode_stats, eps)
    _check_gamma(gamma)
    if not np.isfinite(step_weight):
        raise ValueError(f"step_weight must be finite, got {step_weight}")
    _check_similarity(similarity)
    rows = _rows(group, episode, step, reward, valid, invalid_penalty)
    keys = _anchor_keys(anchor, 0 if rows is None else rows.group.size)
    if rows is None:
        return np.zeros(0)

    episode_level = _grpo(rows, norm, episode_stats, eps)
    step_return = _discounted_returns(rows.episode, rows.num_episodes, rows.order, rows.reward, gamma) - rows.penalty
    if step_group is None:
        step_group, num_step_groups = _step_groups(rows.group, keys, similarity, rows.order)
    else:
        step_group = np.asarray(step_group, dtype=np.int64)
        if step_group.shape != rows.group.shape:
            raise ValueError(f"step_group must hold one code per row: got shape {step_group.shape}")
        num_step_groups = int(step_group.max()) + 1
    step_level = _step_advantages(step_group, num_step_groups, step_return, norm, eps)
    return episode_level + step_weight * step_level


def discounted_returns(episode, step, reward, gamma: float) -> np.ndarray:
    """``R_t = sum_{k>=t} gamma^(k-t) r_k`` over the later rows of each row's episode, one per row.

    Rows of an episode are ordered by ``step`` (only the order counts; steps
    need not be contiguous) and may come in any order. No invalid penalty is
    applied (``gigpo`` subtracts it afterwards). Float64, where the reference
    (verl-agent ``compute_step_discounted_returns``) uses float32 and batch order.
    """
    _check_gamma(gamma)
    episode, step = _int_array("episode", episode), _int_array("step", step)
    reward = np.asarray(reward)
    if reward.ndim != 1:
        raise ValueError(f"reward must be 1-D, got shape {reward.shape}")
    if _check_lengths(episode=episode, step=step, reward=reward) == 0:
        return np.zeros(0)
    reward = reward.astype(np.float64)
    if not np.isfinite(reward).all():
        raise ValueError("reward holds NaN or inf")
    e, num_episodes = factorize(episode)
    return _discounted_returns(e, num_episodes, _step_order(e, step), reward, gamma)


def _check_gamma(gamma: float) -> None:
    if not 0.0 <= gamma <= 1.0:  # also rejects NaN
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")


def _discounted_returns(
    episode_code: np.ndarray, num_episodes: int, order: np.ndarray, reward: np.ndarray, gamma: float
) -> np.ndarray:
    """The segmented reverse scan behind ``discounted_returns``; ``order`` sorts rows by (episode, step).

    Sorted, each episode is a contiguous segment. The scan walks the distance j
    to the episode's end, j = 1 .. (longest episode - 1), and updates the rows at
    that distance in every episode at once with the reference's recurrence
    ``R_t = r_t + gamma * R_{t+1}``. That is one vectorised update per step of the
    longest episode (<= 50 for ALFWorld) and O(rows) work in all, and it is exact
    for any length and any gamma in [0, 1]. The closed form
    ``gamma^-t * reverse_cumsum(gamma^t * r)`` is not: gamma^-t overflows or
    swamps the sum for long episodes (0.95^-1000 ~ 1e22) and is undefined at 0.
    """
    lengths = np.bincount(episode_code, minlength=num_episodes)
    returns = reward[order]  # a copy, updated in place
    longest_first = np.argsort(-lengths, kind="stable")
    last_row = (np.cumsum(lengths) - 1)[longest_first]  # positions in the sorted rows
    longer_than = num_episodes - np.cumsum(np.bincount(lengths))  # [j]: episodes with more than j rows
    for j in range(1, int(lengths.max())):
        rows = last_row[: longer_than[j]] - j
        returns[rows] += gamma * returns[rows + 1]
    out = np.empty_like(returns)
    out[order] = returns
    return out


def _step_advantages(
    step_group: np.ndarray, num_step_groups: int, step_return: np.ndarray, norm: str, eps: float
) -> np.ndarray:
    """A^S: step returns relative to their step group; exactly 0 in a step group of one row."""
    stats = segment_stats(step_group, step_return, num_step_groups)
    centered = stats.centered
    if norm == "std":
        centered = centered / (stats.std[step_group] + eps)  # NaN std for singletons, replaced below
    return np.where(stats.count[step_group] > 1, centered, 0.0)
