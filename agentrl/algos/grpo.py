"""GRPO and RLOO: episode-level advantages over step rows, pure numpy, vectorised, float64.

One row is one agent turn. Rows carry integer ids (``group``, ``episode``,
``step``), the environment reward of that step and whether an action was parsed.
Ids need not be contiguous and rows may come in any order: ``factorize_rows``
checks and factorises them once, and every per-group or per-episode quantity is a
``np.bincount`` (``agentrl/algos/segments.py``), so the cost is one argsort of the
rows by (episode, step) and a few linear passes. GiGPO (``agentrl/algos/gigpo.py``)
takes GRPO's advantage here as its episode level.

The semantics are those of docs/algorithms.md ("GRPO (episode level)" and
"RLOO"). Deviations from the reference code (verl-agent) are stated at each
function. The one that applies to every estimator: the reference computes in
float32, where a group whose scores are equal but not representable (all 9.9,
say) gets advantages of order 0.5 with eps = 1e-6. Here the arithmetic is
float64 and the group statistics are taken on values shifted by one member of
the group, so a group of equal values gets advantages of exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos.segments import check_lengths, factorize, int_ids, segment_stats, step_order

NORMS = ("std", "none")
EPISODE_STATS = ("rows", "episodes")


# ---------------------------------------------------------------------------
# Input checking and the quantities every estimator shares.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeRows:
    """Checked step rows in dense codes, with each episode's return: what every estimator reads."""

    group: np.ndarray  # (B,) dense group code per row
    episode: np.ndarray  # (B,) dense episode code per row
    episode_group: np.ndarray  # (E,) group code per episode
    num_groups: int
    num_episodes: int
    returns: np.ndarray  # (E,) R(tau), before any penalty
    penalty: np.ndarray  # (B,) c * invalid
    reward: np.ndarray  # (B,) float64 step reward
    order: np.ndarray  # (B,) row indices sorted by (episode, step)


def factorize_rows(group, episode, step, reward, valid, invalid_penalty: float) -> EpisodeRows | None:
    """Validate and factorise; None for empty input.

    Episode returns are summed in step order, so they do not depend on the
    order rows come in: two episodes with the same rewards get the same return
    to the last bit, and then exactly 0 advantage between them.
    """
    if not np.isfinite(invalid_penalty) or invalid_penalty < 0:
        raise ValueError(f"invalid_penalty must be a finite number >= 0, got {invalid_penalty}")
    group, episode, step = (int_ids(n, x) for n, x in (("group", group), ("episode", episode), ("step", step)))
    reward, valid = np.asarray(reward), np.asarray(valid)
    for name, a in (("reward", reward), ("valid", valid)):
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    n = check_lengths(group=group, episode=episode, step=step, reward=reward, valid=valid)
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
    order = step_order(e, step)

    return EpisodeRows(
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


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(choices)}")


def check_normalisation(norm: str, episode_stats: str, eps: float) -> None:
    """The arguments GRPO and GiGPO share: ``norm`` in ``NORMS``, ``episode_stats`` in ``EPISODE_STATS``, eps > 0."""
    check_choice("norm", norm, NORMS)
    check_choice("episode_stats", episode_stats, EPISODE_STATS)
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite number > 0, got {eps}")


# ---------------------------------------------------------------------------
# Estimators.
# ---------------------------------------------------------------------------


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
    check_normalisation(norm, episode_stats, eps)
    rows = factorize_rows(group, episode, step, reward, valid, invalid_penalty)
    if rows is None:
        return np.zeros(0)
    return episode_advantages(rows, norm, episode_stats, eps)


def episode_advantages(rows: EpisodeRows, norm: str, episode_stats: str, eps: float) -> np.ndarray:
    """``grpo`` on checked rows; GiGPO's episode level A^E (paper Eq. 3)."""
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
    check_choice("episode_stats", episode_stats, EPISODE_STATS)
    rows = factorize_rows(group, episode, step, reward, valid, invalid_penalty)
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
