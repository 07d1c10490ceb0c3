"""GiGPO's step groups (arXiv 2505.10978, Eq. 6): which rows share an anchor state, and the groups' sizes.

A step group is the rows of one group (and one agent of a team) whose anchor keys are equal, or, with a
similarity threshold, the reference's greedy clusters of anchor texts (``agentrl/algos/similarity_clusters.py``).
``agentrl/algos/gigpo.py`` computes the step level over these groups (Eq. 7); the functions here group rows and
summarise the groups, pure numpy:

- ``step_group_codes``: the step groups as dense codes, one per row (Eq. 6);
- ``step_group_sizes`` and ``step_group_metrics``: their sizes, for logging (the paper reports them);
- ``anchor_keys``, ``check_similarity``, ``group_by_anchor`` and ``given_step_groups``: the checks and the
  grouping on checked rows that ``gigpo_levels`` shares with ``step_group_codes``.

Rows, ids and input checks are those of ``agentrl/algos/grpo.py``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from agentrl.algos.segments import check_lengths, factorize, int_ids, step_order
from agentrl.algos.similarity_clusters import similarity_clusters

STEP_GROUP_METRICS = ("singleton_share", "mean_size", "max_size", "num_groups")


# ---------------------------------------------------------------------------
# Step groups (Eq. 6) and their sizes.
# ---------------------------------------------------------------------------


def step_group_sizes(
    group, anchor: Sequence[Hashable], similarity: float | None = None, *, episode=None, step=None, agent=None
) -> np.ndarray:
    """Size of each row's GiGPO step group, one per row, for logging (see ``step_group_metrics``).

    Step groups are those of ``gigpo``. With ``similarity`` (a threshold in
    (0, 1); string anchors only) the reference's greedy clustering applies:
    within a group, rows are visited in turn and a row joins the first cluster
    whose first member's text ``b`` satisfies
    ``difflib.SequenceMatcher(None, text, b).ratio() >= similarity``, or else
    starts a new cluster. Equal texts always share a cluster (they are matched
    once). The clusters depend on the visiting order: ``gigpo`` visits rows by
    (episode, step); pass ``episode`` and ``step`` here to get the same
    clusters, otherwise rows are visited in input order. Without
    ``similarity`` the order does not matter.
    """
    codes = step_group_codes(group, anchor, similarity, episode=episode, step=step, agent=agent)
    return np.bincount(codes)[codes] if codes.size else codes


def step_group_codes(
    group, anchor: Sequence[Hashable], similarity: float | None = None, *, episode=None, step=None, agent=None
) -> np.ndarray:
    """Dense GiGPO step-group code per row (0, 1, ...), the grouping ``gigpo`` uses (paper Eq. 6).

    Arguments as in ``step_group_sizes``; ``agent`` (one str or int label per row, or None)
    keeps the rows of different agents apart, as ``gigpo`` does. A caller that both computes the
    advantages and logs the group sizes groups the rows once with this and
    passes the codes to ``gigpo(step_group=...)``.
    """
    check_similarity(similarity)
    group = int_ids("group", group)
    keys = anchor_keys(anchor, group.size)
    row_order = _visiting_order(episode, step, group.size)
    if group.size == 0:
        return np.zeros(0, dtype=np.int64)
    g, _ = factorize(group)
    if agent is not None:
        a, num_agents = factorize(np.asarray(agent))
        check_lengths(group=group, agent=a)
        g, _ = factorize(g.astype(np.int64) * num_agents + a)
    codes, _ = group_by_anchor(g, keys, similarity, row_order)
    return codes


def step_group_metrics(sizes) -> dict[str, float]:
    """Summary of per-row step-group sizes (``step_group_sizes``) for logging.

    - ``singleton_share``: share of *rows* whose step group has one row, i.e.
      the rows that get no step-level signal (A^S = 0);
    - ``mean_size``: mean size over *step groups* (rows / step groups), the
      reference's "Avg size of step-level group";
    - ``max_size``: the largest step group;
    - ``num_groups``: the number of step groups.

    Empty input gives 0.0 for every entry.
    """
    sizes = np.asarray(sizes)
    if sizes.ndim != 1:
        raise ValueError(f"sizes must be 1-D, got shape {sizes.shape}")
    if sizes.size == 0:
        return dict.fromkeys(STEP_GROUP_METRICS, 0.0)
    if sizes.dtype.kind not in "iu" or sizes.min() < 1:
        raise ValueError("sizes must be integers >= 1 (per-row step-group sizes)")
    rows_of_size = np.bincount(sizes)
    size = np.arange(rows_of_size.size)
    # A step group of size k contributes k rows that each say k.
    if (rows_of_size[1:] % size[1:]).any():
        raise ValueError("sizes are not per-row step-group sizes: the rows saying size k are not a multiple of k")
    num_groups = int((rows_of_size[1:] // size[1:]).sum())
    return {
        "singleton_share": float(rows_of_size[1] / sizes.size) if rows_of_size.size > 1 else 0.0,
        "mean_size": sizes.size / num_groups,
        "max_size": float(sizes.max()),
        "num_groups": float(num_groups),
    }


# ---------------------------------------------------------------------------
# Step grouping on checked rows.
# ---------------------------------------------------------------------------


def given_step_groups(step_group, num_rows: int) -> tuple[np.ndarray, int]:
    """A caller's step-group codes (``gigpo(step_group=...)``) and their count."""
    step_group = np.asarray(step_group, dtype=np.int64)
    if step_group.shape != (num_rows,):
        raise ValueError(f"step_group must hold one code per row: got shape {step_group.shape}")
    return step_group, int(step_group.max()) + 1


def check_similarity(similarity: float | None) -> None:
    if similarity is None:
        return
    is_number = isinstance(similarity, (int, float, np.integer, np.floating)) and not isinstance(similarity, bool)
    if not is_number or not 0 < similarity < 1:  # also rejects NaN
        raise ValueError(f"similarity must be None or a threshold in (0, 1), got {similarity!r}")


def anchor_keys(anchor, num_rows: int) -> list:
    """Anchor keys as a list of Python objects, one per row."""
    if isinstance(anchor, (str, bytes)):
        raise ValueError("anchor must be a sequence of keys, one per row, not a single string")
    if isinstance(anchor, np.ndarray):
        if anchor.ndim != 1:
            raise ValueError(f"anchor must be 1-D, got shape {anchor.shape}")
        keys = anchor.tolist()  # Python str and int hash faster than numpy scalars
    else:
        keys = list(anchor)
    if len(keys) != num_rows:
        raise ValueError(f"anchor must hold one key per row: got {len(keys)} keys for {num_rows} rows")
    return keys


def _visiting_order(episode, step, num_rows: int) -> np.ndarray:
    """Rows by (episode, step) when both are given, else input order."""
    if episode is None and step is None:
        return np.arange(num_rows)
    if episode is None or step is None:
        raise ValueError("pass both episode and step, or neither")
    episode, step = int_ids("episode", episode), int_ids("step", step)
    check_lengths(group=np.empty(num_rows), episode=episode, step=step)
    if num_rows == 0:
        return np.arange(0)
    e, _ = factorize(episode)
    return step_order(e, step)


def group_by_anchor(
    group_code: np.ndarray, keys: list, similarity: float | None, row_order: np.ndarray
) -> tuple[np.ndarray, int]:
    """Dense step-group code per row, and the number of step groups."""
    if similarity is not None:
        return similarity_clusters(group_code, keys, similarity, row_order)
    anchor_code, num_anchors = _factorize_keys(keys)
    group_of_anchor = np.empty(num_anchors, dtype=group_code.dtype)
    group_of_anchor[anchor_code] = group_code
    if np.array_equal(group_of_anchor[anchor_code], group_code):
        return anchor_code, num_anchors  # no key is shared by two groups (the usual case): no sort needed
    # Pairing with the group code keeps equal keys of different groups apart.
    return factorize(group_code.astype(np.int64) * num_anchors + anchor_code)


def _factorize_keys(keys: list) -> tuple[np.ndarray, int]:
    """Dense codes for hashable keys, in order of first appearance: one dict pass, C loops only."""
    try:
        first_seen = dict.fromkeys(keys)
    except TypeError as err:
        raise ValueError(f"anchor keys must be hashable (str, int, tuple, ...): {err}") from None
    code_of = dict(zip(first_seen, range(len(first_seen))))
    codes = np.array(list(map(code_of.__getitem__, keys)), dtype=np.intp)  # faster than np.fromiter here
    return codes, len(code_of)
