"""GiGPO (arXiv 2505.10978): GRPO's episode level plus a step level over anchor-state groups.

One function per equation of the paper (docs/algorithms.md, "GiGPO"), pure numpy, float64:

- ``discounted_returns``: the step return R_t = sum_{k>=t} gamma^(k-t) r_k (Eq. 5);
- the step groups, rows of one group (and one agent of a team) from the same anchor state (Eq. 6), are
  ``agentrl/algos/step_groups.py``'s: ``step_group_codes``, and ``step_group_sizes`` and
  ``step_group_metrics``, which log their sizes (the paper reports them);
- ``step_advantages``: the step level A^S, a step return relative to its step group (Eq. 7);
- ``gigpo``: A = A^E + omega * A^S (Eq. 8), with A^E GRPO's episode level
  (``agentrl/algos/grpo.py``, Eq. 3); ``gigpo_levels`` gives the two levels apart,
  which the step-credit diagnostics read (``agentrl/algos/credit_diagnostics.py``).

Rows, ids and input checks are those of ``agentrl/algos/grpo.py``; the float64
deviation stated there applies here too, and each function states its own.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from agentrl.algos.grpo import EpisodeRows, check_normalisation, episode_advantages, factorize_rows, scope_segments
from agentrl.algos.segments import check_lengths, factorize, int_ids, segment_stats, step_order
from agentrl.algos.step_groups import anchor_keys, check_similarity, given_step_groups, group_by_anchor


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
    agent=None,
    norm_scope: str = "global",
) -> np.ndarray:
    """GiGPO advantages, one per row: ``A_i = A^E_i + step_weight * A^S_i`` (paper Eq. 8).

    ``A^E`` is ``grpo`` with the same ``norm``, ``episode_stats``, ``invalid_penalty``, ``eps``, ``agent``
    and ``norm_scope`` (Eq. 3; Dr. MAS's Eq. 5 with ``norm_scope="agent"``). ``A^S`` is relative within a step group:

    - step return ``R_i = sum_{k>=t} gamma^(k-t) r_k`` over the row's episode, in ``step`` order
      (``discounted_returns``, Eq. 5), on the rewards before the invalid penalty; then
      ``invalid_penalty * (not valid_i)`` is subtracted from the row's own return only;
    - step groups (``step_group_codes``, Eq. 6): rows of one ``group`` and one ``agent`` with equal ``anchor``
      keys (equal as Python dict keys, so ``1 == 1.0``); keys never match across groups or agents. With
      ``similarity`` (a threshold in (0, 1), string anchors only) the reference's greedy clustering is used
      instead, see ``step_group_sizes``;
    - ``A^S_i = R_i - mu_s`` (``norm="none"``) or ``(R_i - mu_s) / (sigma_s + eps)``
      (``norm="std"``, sigma unbiased); a step group of one row gets exactly 0
      (``step_advantages``, Eq. 7).

    ``norm="none"`` is the reference's ``mean_norm`` and ``norm="std"`` its
    ``mean_std_norm``. Deviations from verl-agent's ``core_gigpo.py``:

    - float64 (the reference's step returns and statistics are float32), so a
      step group of equal returns gets exactly 0;
    - the reference discounts in batch order and clusters in batch order; here both follow (episode, step)
      order, so the result does not depend on the order rows come in. It matches the reference when the batch
      is episode-major with episode ids increasing and steps in order, which is how the reference gathers its
      rollouts.

    ``anchor`` holds one hashable key per row (str, int, tuple; a 1-D numpy
    array works too). Empty input gives an empty array.

    ``step_group`` optionally gives the rows' step-group codes, as ``step_group_codes`` computes them from the
    same rows, anchors, ``similarity`` and ``agent``; a caller that also logs the step-group sizes then groups
    the rows once.
    """
    if not np.isfinite(step_weight):
        raise ValueError(f"step_weight must be finite, got {step_weight}")
    levels = gigpo_levels(
        group,
        episode,
        step,
        reward,
        valid,
        anchor,
        gamma=gamma,
        norm=norm,
        episode_stats=episode_stats,
        invalid_penalty=invalid_penalty,
        eps=eps,
        similarity=similarity,
        step_group=step_group,
        agent=agent,
        norm_scope=norm_scope,
    )
    if levels is None:
        return np.zeros(0)
    return levels.episode + step_weight * levels.step


@dataclass(frozen=True)
class GigpoLevels:
    """GiGPO's two levels for one batch, apart, with what the step level was computed from."""

    rows: EpisodeRows  # the checked rows (episode returns, group of each episode)
    episode: np.ndarray  # (B,) A^E, the episode level (Eq. 3)
    step: np.ndarray  # (B,) A^S, the step level before omega (Eq. 7)
    step_return: np.ndarray  # (B,) R_t (Eq. 5) less the row's own invalid penalty
    step_group: np.ndarray  # (B,) dense step-group code (Eq. 6)
    num_step_groups: int


def gigpo_levels(
    group,
    episode,
    step,
    reward,
    valid,
    anchor: Sequence[Hashable],
    *,
    gamma: float = 0.95,
    norm: str = "std",
    episode_stats: str = "rows",
    invalid_penalty: float = 0.1,
    eps: float = 1e-6,
    similarity: float | None = None,
    step_group: np.ndarray | None = None,
    agent=None,
    norm_scope: str = "global",
) -> GigpoLevels | None:
    """``gigpo``'s episode level A^E and step level A^S apart (``gigpo`` returns ``A^E + omega * A^S``).

    Arguments and checks as in ``gigpo``, which calls this; None for empty input.
    """
    check_normalisation(norm, episode_stats, eps, norm_scope)
    _check_gamma(gamma)
    check_similarity(similarity)
    rows = factorize_rows(group, episode, step, reward, valid, invalid_penalty, agent)
    keys = anchor_keys(anchor, 0 if rows is None else rows.group.size)
    if rows is None:
        return None

    episode_level = episode_advantages(rows, norm, episode_stats, eps, norm_scope)
    step_return = _discount_scan(rows.episode, rows.num_episodes, rows.order, rows.reward, gamma) - rows.penalty
    if step_group is None:
        # An agent's turn is never compared with another agent's, whatever norm_scope is.
        step_group, num_step_groups = group_by_anchor(scope_segments(rows, "agent")[0], keys, similarity, rows.order)
    else:
        step_group, num_step_groups = given_step_groups(step_group, rows.group.size)
    step_level = step_advantages(step_group, num_step_groups, step_return, norm, eps)
    return GigpoLevels(rows, episode_level, step_level, step_return, step_group, num_step_groups)


# ---------------------------------------------------------------------------
# Step returns (Eq. 5).
# ---------------------------------------------------------------------------


def discounted_returns(episode, step, reward, gamma: float) -> np.ndarray:
    """``R_t = sum_{k>=t} gamma^(k-t) r_k`` (paper Eq. 5) over the later rows of each row's episode, one per row.

    Rows of an episode are ordered by ``step`` (only the order counts; steps
    need not be contiguous) and may come in any order. No invalid penalty is
    applied (``gigpo`` subtracts it afterwards). Float64, where the reference
    (verl-agent ``compute_step_discounted_returns``) uses float32 and batch order.
    """
    _check_gamma(gamma)
    episode, step = int_ids("episode", episode), int_ids("step", step)
    reward = np.asarray(reward)
    if reward.ndim != 1:
        raise ValueError(f"reward must be 1-D, got shape {reward.shape}")
    if check_lengths(episode=episode, step=step, reward=reward) == 0:
        return np.zeros(0)
    reward = reward.astype(np.float64)
    if not np.isfinite(reward).all():
        raise ValueError("reward holds NaN or inf")
    e, num_episodes = factorize(episode)
    return _discount_scan(e, num_episodes, step_order(e, step), reward, gamma)


def _check_gamma(gamma: float) -> None:
    if not 0.0 <= gamma <= 1.0:  # also rejects NaN
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")


def _discount_scan(
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


# ---------------------------------------------------------------------------
# The step level (Eq. 7).
# ---------------------------------------------------------------------------


def step_advantages(
    step_group: np.ndarray, num_step_groups: int, step_return: np.ndarray, norm: str, eps: float
) -> np.ndarray:
    """The step level A^S (paper Eq. 7), one per row: a step return relative to its step group.

    ``A^S_i = (R_i - mu_s) / (sigma_s + eps)`` for ``norm="std"`` (sigma unbiased)
    and ``R_i - mu_s`` for ``norm="none"``, with mu_s and sigma_s over the step
    returns of row i's step group s. A step group of one row gets exactly 0.
    ``step_group`` holds dense codes in [0, num_step_groups) (``step_group_codes``)
    and ``step_return`` the penalised step returns, as ``gigpo`` computes them;
    neither is checked here.
    """
    stats = segment_stats(step_group, step_return, num_step_groups)
    centered = stats.centered
    if norm == "std":
        centered = centered / (stats.std[step_group] + eps)  # NaN std for singletons, replaced below
    return np.where(stats.count[step_group] > 1, centered, 0.0)
