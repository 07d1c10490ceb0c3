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

Rows may name the agent of a team that took them (``agent``). With
``norm_scope="agent"`` the statistics are taken per (group, agent), Dr. MAS's
agent-wise normalisation (arXiv 2602.08847, Eq. 5); ``"global"`` takes them per
group (its Eq. 2 with ``episode_stats="episode_means"``). See ``baseline_samples``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos.segments import check_lengths, factorize, int_ids, segment_stats, step_order

NORMS = ("std", "none")
EPISODE_STATS = ("rows", "episodes", "episode_means")
NORM_SCOPES = ("global", "agent")


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
    agent: np.ndarray  # (B,) dense agent code per row (all 0 when the rows name no agent)
    num_agents: int


def factorize_rows(group, episode, step, reward, valid, invalid_penalty: float, agent=None) -> EpisodeRows | None:
    """Validate and factorise; None for empty input.

    ``agent`` optionally names the agent that took each row (str or int labels);
    None: every row is one agent's.

    Episode returns are summed in step order, so they do not depend on the
    order rows come in: two episodes with the same rewards get the same return
    to the last bit, and then exactly 0 advantage between them.
    """
    if not np.isfinite(invalid_penalty) or invalid_penalty < 0:
        raise ValueError(f"invalid_penalty must be a finite number >= 0, got {invalid_penalty}")
    group, episode, step = (int_ids(n, x) for n, x in (("group", group), ("episode", episode), ("step", step)))
    reward, valid = np.asarray(reward), np.asarray(valid)
    agent = np.zeros(len(group), dtype=np.intp) if agent is None else np.asarray(agent)
    for name, a in (("reward", reward), ("valid", valid), ("agent", agent)):
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    n = check_lengths(group=group, episode=episode, step=step, reward=reward, valid=valid, agent=agent)
    if n == 0:
        return None
    if agent.dtype.kind not in "iuU":
        raise ValueError(f"agent must hold str or int labels, got dtype {agent.dtype}")

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
    agent_code, num_agents = factorize(agent)

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
        agent=agent_code,
        num_agents=num_agents,
    )


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(choices)}")


def check_normalisation(norm: str, episode_stats: str, eps: float, norm_scope: str = "global") -> None:
    """The arguments GRPO and GiGPO share: ``norm``, ``episode_stats``, ``norm_scope`` from their lists, eps > 0."""
    check_choice("norm", norm, NORMS)
    check_choice("episode_stats", episode_stats, EPISODE_STATS)
    check_choice("norm_scope", norm_scope, NORM_SCOPES)
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite number > 0, got {eps}")


# ---------------------------------------------------------------------------
# What the statistics are taken over: samples and segments.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BaselineSamples:
    """The values a baseline's statistics are taken over, and how each row reads them.

    A *segment* is what one set of statistics covers: a group (``norm_scope="global"``)
    or a (group, agent) pair (``"agent"``). A row's centred value is
    ``value[of_row[i]] - mean(segment) - own_penalty[i]``.
    """

    segment: np.ndarray  # (S,) dense segment code of each sample
    value: np.ndarray  # (S,) the samples
    of_row: np.ndarray  # (B,) the sample each row reads
    own_penalty: np.ndarray | float  # (B,) subtracted from a row's own value only ("episodes"), else 0
    num_segments: int


def scope_segments(rows: EpisodeRows, norm_scope: str) -> tuple[np.ndarray, int]:
    """Dense segment code per row, and their number: the group, or the (group, agent) pair."""
    if norm_scope == "global":
        return rows.group, rows.num_groups
    return factorize(rows.group.astype(np.int64) * rows.num_agents + rows.agent)


def baseline_samples(rows: EpisodeRows, episode_stats: str, norm_scope: str) -> BaselineSamples:
    """The samples of each segment (``scope_segments``) that mu and sigma are taken over.

    With ``s_i = R(tau_e(i)) - c * u_i`` the row score:

    - ``"rows"``: every row is a sample, with value ``s_i``. Under the agent scope this
      is Dr. MAS's Eq. 5, ``A_(k)^{i,t} = (R^i - mu_k) / sigma_k`` with mu_k, sigma_k over
      Y_k, the rows agent k took in the group (the reference's ``group_by_agent_id=True``).
    - ``"episode_means"``: one sample per episode and segment, the mean of the segment's
      row scores in that episode, ``m_e = mean_{i in e} s_i``; a row's own value is ``m_e``
      too. Under the global scope this is Dr. MAS's baseline, Eq. 2,
      ``A^i = (R^i - mean_j R^j) / std_j R^j`` over the group's N trajectories (the
      reference's ``group_by_agent_id=False``; ``m_e = R^i`` when no row is invalid).
    - ``"episodes"`` (GiGPO's Eq. 3): one sample per episode and segment, the unpenalised
      return R(tau_e); the penalty ``c * u_i`` lowers the row's own value only.

    Under the global scope a segment's episodes are the group's episodes; under the
    agent scope they are the episodes in which the agent took a row.
    """
    segment, num_segments = scope_segments(rows, norm_scope)
    score = rows.returns[rows.episode] - rows.penalty
    if episode_stats == "rows":
        return BaselineSamples(segment, score, np.arange(segment.size), 0.0, num_segments)
    if norm_scope == "global":
        unit, num_units, unit_segment = rows.episode, rows.num_episodes, rows.episode_group
    else:
        unit, num_units = factorize(rows.episode.astype(np.int64) * num_segments + segment)
        unit_segment = np.empty(num_units, dtype=np.intp)
        unit_segment[unit] = segment
    if episode_stats == "episodes":
        unit_episode = np.empty(num_units, dtype=np.intp)
        unit_episode[unit] = rows.episode
        return BaselineSamples(unit_segment, rows.returns[unit_episode], unit, rows.penalty, num_segments)
    # episode_means; summed in step order, so the means do not depend on the order rows come in
    order = rows.order
    totals = np.bincount(unit[order], weights=score[order], minlength=num_units)
    means = totals / np.bincount(unit, minlength=num_units)
    return BaselineSamples(unit_segment, means, unit, 0.0, num_segments)


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
    agent=None,
    norm_scope: str = "global",
) -> np.ndarray:
    """Episode-level GRPO advantages for multi-turn agents, one per row.

    Row score ``s_i = R(tau of row i) - invalid_penalty * (not valid_i)``, where
    R is the sum of the episode's step rewards. Then ``A_i = v_i - mu`` for
    ``norm="none"`` and ``A_i = (v_i - mu) / (sigma + eps)`` for ``norm="std"``,
    with sigma the unbiased std (ddof=1), ``v_i`` the row's own value (``s_i``, or
    its episode's mean score under ``"episode_means"``), and mu, sigma the statistics
    of the row's segment.

    ``norm_scope`` picks the segment: ``"global"``, the row's group (today's GRPO);
    ``"agent"``, the row's (group, ``agent``) pair, Dr. MAS's agent-wise
    normalisation (arXiv 2602.08847, Eq. 5). ``agent`` holds one str or int label
    per row; None is one agent.

    ``episode_stats`` picks what mu and sigma are taken over (``baseline_samples``):

    - ``"rows"`` (reference, verl-agent's ``compute_mean_std_cross_steps=True``;
      Dr. MAS's ``group_by_agent_id=True``): the scores of all rows of the segment,
      so longer episodes weigh more and the invalid penalty enters the statistics.
    - ``"episodes"`` (GiGPO paper Eq. 3): the segment's episode returns R(tau), each
      counted once and *without* the invalid penalty. The penalty still lowers the
      row's own score ``s_i``. The paper has no invalid penalty, so this is how
      agentrl combines the two.
    - ``"episode_means"`` (Dr. MAS's baseline, Eq. 2, and its reference's
      ``group_by_agent_id=False``): each episode counted once by the mean of its rows'
      penalised scores in the segment, and every row takes that mean as its own value.

    A segment with a single sample has mu = 0 and sigma = 1, so ``A_i = v_i``, as in
    the reference (which divides by 1 + eps there: a relative difference of 1e-6).

    ``step`` only orders the sum of an episode's rewards, so the result does not
    depend on the order rows come in, and rejects duplicated (episode, step) rows,
    which would double an episode's return. Episode ids must be unique across
    groups. Empty input gives an empty array.
    """
    check_normalisation(norm, episode_stats, eps, norm_scope)
    rows = factorize_rows(group, episode, step, reward, valid, invalid_penalty, agent)
    if rows is None:
        return np.zeros(0)
    return episode_advantages(rows, norm, episode_stats, eps, norm_scope)


def episode_advantages(
    rows: EpisodeRows, norm: str, episode_stats: str, eps: float, norm_scope: str = "global"
) -> np.ndarray:
    """``grpo`` on checked rows; GiGPO's episode level A^E (paper Eq. 3)."""
    samples = baseline_samples(rows, episode_stats, norm_scope)
    stats = segment_stats(samples.segment, samples.value, samples.num_segments)
    row_segment = samples.segment[samples.of_row]
    centered = stats.centered[samples.of_row] - samples.own_penalty
    own = samples.value[samples.of_row] - samples.own_penalty
    if norm == "std":
        centered = centered / (stats.std[row_segment] + eps)
    # Single-sample segments: mu = 0, sigma = 1.
    return np.where(stats.count[row_segment] > 1, centered, own)


def rloo(
    group,
    episode,
    step,
    reward,
    valid,
    *,
    episode_stats: str = "rows",
    invalid_penalty: float = 0.1,
    agent=None,
    norm_scope: str = "global",
) -> np.ndarray:
    """RLOO (leave-one-out) advantages, one per row, no std normalisation; ``s_i`` is ``grpo``'s row score.

    The samples of a segment (a group, or a (group, agent) pair with ``norm_scope="agent"``,
    Dr. MAS's reference ``compute_rloo_outcome_advantage`` with ``group_by_agent_id=True``)
    are those of ``grpo`` (``baseline_samples``); each row's baseline is the mean of the
    segment's *other* n - 1 samples, ``A_i = v_i - sum_{j != i} x_j / (n - 1) = (v_i - mean) * n / (n - 1)``.

    - ``"rows"`` (default; verl-agent's ``compute_rloo_outcome_advantage`` with
      ``compute_mean_std_cross_steps=True``): the samples are the n_g rows of the group,
      so a row's own episode is in its baseline: A (3 rows, R = 10), B (1 row, R = 0) give [3.33]*3 + [-10].
    - ``"episodes"`` (a deviation: the paper's RLOO, one episode one sample; the reference's
      ``cross_steps=False`` takes each episode's first row's penalised score instead): the N_g
      returns, each once and unpenalised; the penalty lowers the row's own value only,
      ``A_i = R(tau_e(i)) - sum_{e' != e(i)} R(tau_e') / (N_g - 1) - c * (not valid_i)``:
      [10, 10, 10, -10] above.
    - ``"episode_means"``: one sample per episode, its rows' mean score, which is also each
      row's own value.

    A segment of one sample (one row, or one episode) has baseline 0, so ``A_i = v_i``, as in
    the reference. Input rules as in ``grpo``.
    """
    check_choice("episode_stats", episode_stats, EPISODE_STATS)
    check_choice("norm_scope", norm_scope, NORM_SCOPES)
    rows = factorize_rows(group, episode, step, reward, valid, invalid_penalty, agent)
    if rows is None:
        return np.zeros(0)
    samples = baseline_samples(rows, episode_stats, norm_scope)
    stats = segment_stats(samples.segment, samples.value, samples.num_segments)
    n = stats.count[samples.segment[samples.of_row]]
    # x_i - mean(others) = (x_i - mean) * n / (n - 1)
    loo = stats.centered[samples.of_row] * n / np.maximum(n - 1, 1) - samples.own_penalty
    own = samples.value[samples.of_row] - samples.own_penalty
    return np.where(n > 1, loo, own)
