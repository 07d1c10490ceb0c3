"""Step-credit diagnostics: what GiGPO's step level had, or would have had, to work with in one batch.

GiGPO (arXiv 2505.10978) adds a step level A^S to GRPO's episode level A^E (``agentrl/algos/gigpo.py``).
A^S compares rows taken from the same anchor state within a task group (a step group, Eq. 6), so it
says nothing where a state is visited once (a step group of one row) or where every row of a step
group has the same step return. These figures measure that, for every estimator: under GRPO and
RLOO they are those of the GiGPO that would have been computed from the same batch (the same step
groups, which never mix a team's agents, and ``gigpo_levels`` on the same rows, agents and
``norm_scope``), so a GRPO run shows what GiGPO would have had to work with. docs/algorithms.md,
"Reading the step-credit diagnostics", says how to read them.

``credit_rows`` takes one batch's ``GigpoLevels`` to the per-row and per-group values the figures
need (``CreditRows``), ``CreditRows.concat`` joins the ranks' rows, and ``credit_metrics`` turns
them into the logged figures, each defined in its docstring. A figure whose denominator is empty
(no rows, no step group of two rows, or no spread for a correlation) is NaN: undefined, not 0
(metrics.jsonl writes it as null).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos.gigpo import GigpoLevels
from agentrl.algos.segments import segment_stats

# (name, smallest size, largest size or None): the step-group size buckets of GiGPO's analysis of
# ALFWorld (paper §5.5), whose largest bucket, >= 10, is split there further into 10-49 and >= 50.
SIZE_BUCKETS = (("1", 1, 1), ("2_4", 2, 4), ("5_9", 5, 9), ("10_plus", 10, None))

CREDIT_METRICS = (
    *(f"step_group_size_{name}_share" for name, _, _ in SIZE_BUCKETS),
    "step_advantage_nonzero_share",
    "episode_advantage_abs_mean",
    "step_advantage_abs_mean",
    "episode_step_advantage_correlation",
    "episode_groups_no_signal_share",
    "step_groups_no_signal_share",
)


@dataclass(frozen=True)
class CreditRows:
    """One batch's rows as the diagnostics read them (B rows, G task groups, S step groups of two or more rows)."""

    step_group_size: np.ndarray  # (B,) the number of rows in the row's step group
    episode_advantage: np.ndarray  # (B,) A^E
    step_advantage: np.ndarray  # (B,) A^S, before GiGPO's weight omega
    episode_group_equal: np.ndarray  # (G,) bool: every episode of the task group has the same return
    step_group_equal: np.ndarray  # (S,) bool: every row of the step group has the same step return

    @staticmethod
    def concat(parts: list[CreditRows]) -> CreditRows:
        """The rows of several batches (every rank's) as one; groups never span batches."""
        if not parts:
            return empty_credit_rows()
        return CreditRows(*(np.concatenate(column) for column in zip(*(_columns(p) for p in parts))))


def _columns(rows: CreditRows) -> tuple[np.ndarray, ...]:
    return (
        rows.step_group_size,
        rows.episode_advantage,
        rows.step_advantage,
        rows.episode_group_equal,
        rows.step_group_equal,
    )


def empty_credit_rows() -> CreditRows:
    """No rows (an empty batch)."""
    no_rows = np.zeros(0)
    return CreditRows(np.zeros(0, dtype=np.int64), no_rows, no_rows, np.zeros(0, bool), np.zeros(0, bool))


def credit_rows(levels: GigpoLevels | None) -> CreditRows:
    """The per-row and per-group values behind ``credit_metrics``, from GiGPO's levels of one batch.

    - a row's step-group size is the number of rows sharing its step group (``levels.step_group``);
    - a task group's episode returns R(tau) are "equal" when they are all the same float
      (before the invalid penalty, as GRPO's ``episode_stats="episodes"`` reads them); a group of one
      episode counts as equal;
    - a step group's step returns (the penalised R_t that A^S compares, Eq. 7) are "equal" when they
      are all the same float; only step groups of two or more rows are listed, since a group of one
      row never has a step signal and is counted by its size instead.

    Equal values are exactly equal here: returns are summed in step order in float64, and the
    statistics are shifted by one member (``segment_stats``), so equal values leave a spread of
    exactly 0. ``levels`` None (an empty batch) gives no rows.
    """
    if levels is None:
        return empty_credit_rows()
    rows = levels.rows
    episode_groups = segment_stats(rows.episode_group, rows.returns, rows.num_groups)
    step_groups = segment_stats(levels.step_group, levels.step_return, levels.num_step_groups)
    shared = step_groups.count > 1
    return CreditRows(
        step_group_size=step_groups.count[levels.step_group].astype(np.int64),
        episode_advantage=levels.episode,
        step_advantage=levels.step,
        episode_group_equal=(episode_groups.count == 1) | (episode_groups.std == 0),
        step_group_equal=step_groups.std[shared] == 0,
    )


def credit_metrics(rows: CreditRows) -> dict[str, float]:
    """The logged figures (names in ``CREDIT_METRICS``), over every row and group of ``rows``.

    - ``step_group_size_<bucket>_share``: ``size_bucket_shares`` of the rows' step-group sizes;
    - ``step_advantage_nonzero_share``: ``nonzero_share`` of A^S, the rows the step level moves;
    - ``episode_advantage_abs_mean``, ``step_advantage_abs_mean``: mean |A^E| and mean |A^S| over the
      rows (rows of singleton step groups count, with A^S = 0);
    - ``episode_step_advantage_correlation``: ``pearson(A^E, A^S)`` over the rows;
    - ``episode_groups_no_signal_share``: share of task groups whose episode returns are all equal
      (GRPO's episode level has nothing to compare there, but invalid penalties);
    - ``step_groups_no_signal_share``: share of the step groups of two or more rows whose step
      returns are all equal (a recurring state whose rows still give A^S = 0); NaN when there is
      no such step group.
    """
    return {
        **{f"step_group_size_{name}_share": share for name, share in size_bucket_shares(rows.step_group_size).items()},
        "step_advantage_nonzero_share": nonzero_share(rows.step_advantage),
        "episode_advantage_abs_mean": _mean(np.abs(rows.episode_advantage)),
        "step_advantage_abs_mean": _mean(np.abs(rows.step_advantage)),
        "episode_step_advantage_correlation": pearson(rows.episode_advantage, rows.step_advantage),
        "episode_groups_no_signal_share": _mean(rows.episode_group_equal),
        "step_groups_no_signal_share": _mean(rows.step_group_equal),
    }


def size_bucket_shares(sizes) -> dict[str, float]:
    """Share of *rows* (steps) whose step group's size falls in each bucket of ``SIZE_BUCKETS``: 1, 2-4, 5-9, >= 10.

    ``sizes`` holds one step-group size per row (``step_group_sizes``); the shares sum to 1. A row
    is counted, not a group: a step group of 8 rows weighs 8, since every row is a training sample.
    (GiGPO's paper states its distribution in step groups.) No rows: NaN for every bucket.
    """
    sizes = np.asarray(sizes)
    if sizes.ndim != 1:
        raise ValueError(f"sizes must be 1-D, got shape {sizes.shape}")
    if sizes.size and (sizes.dtype.kind not in "iu" or sizes.min() < 1):
        raise ValueError("sizes must be integers >= 1 (per-row step-group sizes)")
    return {
        name: _mean((sizes >= low) & (sizes <= (high if high is not None else np.inf)))
        for name, low, high in SIZE_BUCKETS
    }


def nonzero_share(values) -> float:
    """Share of rows whose value is not exactly 0; NaN for no rows.

    For A^S: a row of a singleton step group, of a step group of equal step returns, or whose step
    return equals its group's mean gets exactly 0 (float64, ``step_advantages``).
    """
    values = np.asarray(values, dtype=np.float64)
    return _mean(values != 0)


def pearson(x, y) -> float:
    """Pearson's correlation ``cov(x, y) / (std(x) std(y))`` over paired rows.

    NaN when it is undefined: fewer than two rows, or either column constant (zero variance), as
    when no row has a step signal (A^S all 0) or every episode of the batch has the same advantage.
    Not 0: "no spread" and "uncorrelated" read differently.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D and of equal length, got shapes {x.shape} and {y.shape}")
    # Constant is tested exactly: x - mean(x) of equal values can be off by rounding, not 0.
    if x.size < 2 or (x == x[0]).all() or (y == y[0]).all():
        return float("nan")
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy = float(dx @ dx), float(dy @ dy)
    return float(np.clip((dx @ dy) / np.sqrt(sxx * syy), -1.0, 1.0))


def _mean(values: np.ndarray) -> float:
    """The mean as a float; NaN for no values (numpy would warn)."""
    return float(np.mean(values)) if np.size(values) else float("nan")
