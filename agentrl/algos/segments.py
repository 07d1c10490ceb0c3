"""Row arrays: input checks and per-segment arithmetic shared by the advantage estimators.

A segment is any partition of the rows (groups, episodes, GiGPO step groups).
Ids are factorised into dense codes (``factorize``: a presence table for dense
ids, ``np.unique`` otherwise) and every per-segment quantity is a
``np.bincount``, so the cost is a few linear passes. Statistics are float64 and
taken on values shifted by one member of their segment, so a segment of equal
values has exactly zero spread.

The estimators (``agentrl/algos/grpo.py``, ``agentrl/algos/gigpo.py``) check
their id columns with ``int_ids`` and ``check_lengths`` and order rows by
(episode, step) with ``step_order``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def factorize(ids) -> tuple[np.ndarray, int]:
    """Dense codes 0..K-1 for arbitrary integer ids, numbered in increasing id order, and K."""
    ids = np.asarray(ids).reshape(-1)
    if ids.size and ids.dtype.kind in "iu":
        lo, hi = ids.min(), ids.max()
        if int(hi) - int(lo) <= 4 * ids.size + 1024:
            # Dense ids (the usual 0..N-1): a presence table and a cumsum, no sort.
            # Signed ids widen first (int8 -100..100 spans 200); unsigned ids cannot underflow.
            wide = ids.astype(np.int64) if ids.dtype.kind == "i" else ids
            offset = (wide - wide.dtype.type(lo)).astype(np.intp)
            present = np.zeros(int(hi) - int(lo) + 1, dtype=bool)
            present[offset] = True
            code_of_offset = np.cumsum(present, dtype=np.intp) - 1
            return code_of_offset[offset], int(code_of_offset[-1]) + 1
    uniques, codes = np.unique(ids, return_inverse=True)
    return codes.reshape(-1).astype(np.intp, copy=False), int(uniques.size)


@dataclass(frozen=True)
class SegmentStats:
    """Statistics of ``values`` per segment.

    ``count``, ``mean`` and ``std`` have one entry per segment; ``std`` is the
    unbiased std (ddof=1) and NaN for segments of fewer than two values.
    ``centered`` has one entry per value: ``value - mean`` of its segment,
    exactly 0 for every value of a segment whose values are all equal.
    Conventions for small segments (GRPO: mean 0 and std 1 for one row; GiGPO:
    advantage 0 for one row) are the caller's.
    """

    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    centered: np.ndarray


def segment_stats(segment: np.ndarray, values: np.ndarray, num_segments: int) -> SegmentStats:
    """Per-segment count, mean and unbiased std of ``values``.

    ``segment`` holds dense codes in [0, num_segments) (see ``factorize``).
    Two passes on values shifted by one member of their segment: the shift makes
    a constant segment exactly 0 before any rounding, and keeps the variance
    accurate when values are large compared with their spread.
    """
    values = np.asarray(values, dtype=np.float64)
    count = np.bincount(segment, minlength=num_segments)
    ref = np.zeros(num_segments)
    ref[segment] = values  # any member will do; repeated indices keep one of them
    shifted = values - ref[segment]
    safe = np.maximum(count, 1)
    shifted_mean = np.bincount(segment, weights=shifted, minlength=num_segments) / safe
    centered = shifted - shifted_mean[segment]
    sq = np.bincount(segment, weights=centered * centered, minlength=num_segments)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.where(count > 1, np.sqrt(sq / np.maximum(count - 1, 1)), np.nan)
    return SegmentStats(count=count, mean=ref + shifted_mean, std=std, centered=centered)


def int_ids(name: str, x) -> np.ndarray:
    """``x`` as a 1-D integer array (any integer dtype), or a ValueError naming the column."""
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.size and a.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    return a


def check_lengths(**arrays) -> int:
    """The common length of the named row arrays, or a ValueError listing every length."""
    lengths = {name: np.shape(a)[0] if np.ndim(a) else -1 for name, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"row arrays must have equal lengths, got {lengths}")
    return next(iter(lengths.values()))


def _episode_step_key(episode_code: np.ndarray, step: np.ndarray) -> np.ndarray:
    """One int64 per row that sorts like (episode, step): one argsort instead of a lexsort."""
    lo, hi = int(step.min()), int(step.max())
    span = hi - lo + 1
    if lo > -(2**62) and hi < 2**62 and span * (int(episode_code.max()) + 1) < 2**62:
        # Steps are small in practice (0..49): shifting keeps their order and skips a sort.
        return episode_code.astype(np.int64) * span + (step.astype(np.int64) - lo)
    s, num_steps = factorize(step)
    return episode_code.astype(np.int64) * num_steps + s


def step_order(episode_code: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Row indices sorted by (episode code, step); rejects duplicated (episode, step) rows."""
    key = _episode_step_key(episode_code, step)
    order = np.argsort(key)
    sorted_key = key[order]
    if (sorted_key[1:] == sorted_key[:-1]).any():
        raise ValueError("duplicate (episode, step) rows")
    return order
