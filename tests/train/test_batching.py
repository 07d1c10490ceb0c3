"""Step rows -> TRL's tensors: padding, padding rows that weigh nothing, log-prob rows, micro-batch trimming, and
micro-batches packed to a token budget (`trainer.micro_batch_tokens`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.errors import UserError
from agentrl.rollout.batch import StepBatch
from agentrl.train.batching import (
    length_order,
    micro_batch_bounds,
    micro_batches,
    padded_rows,
    row_slices,
    row_spans,
    sampled_logps,
    split_to_count,
    token_budget_bounds,
    token_tensors,
)

PAD = 0


def _batch() -> StepBatch:
    return StepBatch(
        group=[0, 0],
        prompt_ids=[[5, 6, 7], [8]],
        completion_ids=[[9, 10], [11, 12, 13]],
        logprobs=[[-0.5, -0.25], None],
        replayed=[False, True],
    )


def test_rows_are_sorted_by_length_and_padded_on_the_right_sides():
    batch = _batch()
    order = length_order(batch)
    assert order == [1, 0]  # 4 tokens before 5
    t = token_tensors(batch, order, PAD)
    assert t["prompt_ids"].tolist() == [[PAD, PAD, 8], [5, 6, 7]]
    assert t["prompt_mask"].tolist() == [[0, 0, 1], [1, 1, 1]]
    assert t["completion_ids"].tolist() == [[11, 12, 13], [9, 10, PAD]]
    assert t["completion_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]


def test_padding_rows_attend_one_token_and_carry_no_completion():
    t = token_tensors(_batch(), [0, 1], PAD, padding=2)
    assert t["prompt_ids"].shape == (4, 3)
    assert t["prompt_mask"][2:].tolist() == [[0, 0, 1], [0, 0, 1]]  # never an all-masked row (NaN attention)
    assert t["completion_mask"][2:].sum() == 0
    assert padded_rows(np.array([1.5, -2.0]), 2).tolist() == [1.5, -2.0, 0.0, 0.0]


def test_behaviour_logps_are_required_for_every_row():
    with pytest.raises(UserError, match="importance_correction"):
        sampled_logps(_batch(), [0, 1], 3)


def test_sampler_logps_leave_replayed_rows_out():
    logps = sampled_logps(_batch(), [0, 1], 3, padding=1, missing=float("nan"), skip_replayed=True)
    assert logps[0].tolist() == [-0.5, -0.25, 0.0]
    assert all(math.isnan(v) for v in logps[1].tolist())  # replayed: no correction (ratio 1)
    assert logps[2].tolist() == [0.0, 0.0, 0.0]  # padding row


def test_micro_batches_cover_every_row_once_and_trim_unused_columns():
    t = token_tensors(_batch(), length_order(_batch()), PAD, padding=1)
    t["advantages"] = torch.tensor([1.0, 2.0, 0.0])
    micros = list(micro_batches(t, 1))
    assert [m["advantages"].tolist() for m in micros] == [[1.0], [2.0], [0.0]]
    assert micros[0]["prompt_ids"].tolist() == [[8]]  # the short prompt's left padding is dropped
    assert micros[1]["completion_ids"].tolist() == [[9, 10]]
    untrimmed = list(micro_batches(t, 2, trim=False))
    assert [m["prompt_ids"].shape for m in untrimmed] == [(2, 3), (1, 3)]


# --------------------------------------------------------------------------- micro-batches by token budget


def _tokens(prompt_spans, completion_spans, start: int, end: int) -> int:
    """What a trimmed micro-batch of rows [start, end) holds, padding included."""
    return (end - start) * (max(prompt_spans[start:end]) + max(completion_spans[start:end]))


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), max_size=30),
    max_rows=st.integers(1, 8),
    max_tokens=st.integers(1, 200),
)
def test_packing_keeps_order_covers_every_row_once_and_stays_within_the_budget(rows, max_rows, max_tokens):
    prompts = np.array([p for p, _ in rows], dtype=int)
    completions = np.array([c for _, c in rows], dtype=int)
    bounds = token_budget_bounds(prompts, completions, max_rows, max_tokens)
    covered = [i for start, end in bounds for i in range(start, end)]
    assert covered == list(range(len(rows)))  # every row once, in order, no empty micro-batch
    for start, end in bounds:
        assert end - start <= max_rows
        assert end - start == 1 or _tokens(prompts, completions, start, end) <= max_tokens
    for (start, _), (next_start, _) in zip(bounds, bounds[1:]):
        # greedy: the next row would have broken a limit (so the packing is not needlessly fine)
        grown = _tokens(prompts, completions, start, next_start + 1)
        assert next_start + 1 - start > max_rows or grown > max_tokens


def test_a_row_longer_than_the_budget_goes_alone():
    prompts, completions = np.array([2, 2, 9, 2, 2]), np.array([1, 1, 9, 1, 1])
    assert token_budget_bounds(prompts, completions, max_rows=8, max_tokens=6) == [(0, 2), (2, 3), (3, 5)]
    assert token_budget_bounds(prompts, completions, max_rows=1, max_tokens=100) == [(i, i + 1) for i in range(5)]
    assert token_budget_bounds(np.array([], dtype=int), np.array([], dtype=int), 4, 10) == []


def test_the_budget_counts_the_longest_prompt_plus_the_longest_completion():
    # rows 0 and 1 each take 5 tokens, but together they pad to 2 x (4 + 4) = 16
    prompts, completions = np.array([4, 1]), np.array([1, 4])
    assert token_budget_bounds(prompts, completions, max_rows=8, max_tokens=15) == [(0, 1), (1, 2)]
    assert token_budget_bounds(prompts, completions, max_rows=8, max_tokens=16) == [(0, 2)]


def test_spans_are_what_trimming_keeps():
    t = token_tensors(_batch(), length_order(_batch()), PAD, padding=1)
    t["advantages"] = torch.tensor([1.0, 2.0, 0.0])
    prompts, completions = row_spans(t)
    assert prompts.tolist() == [1, 3, 1] and completions.tolist() == [3, 2, 1]  # the padding row: 1 and (empty) 1
    for start, end in [(0, 1), (1, 2), (2, 3), (0, 2), (1, 3), (0, 3)]:
        (micro,) = row_slices(t, [(start, end)])
        width = micro["prompt_ids"].size(1) + micro["completion_ids"].size(1)
        assert micro["prompt_ids"].size(0) * width == _tokens(prompts, completions, start, end)


def test_bounds_by_rows_are_the_plain_micro_batches():
    t = token_tensors(_batch(), length_order(_batch()), PAD, padding=1)
    t["advantages"] = torch.tensor([1.0, 2.0, 0.0])
    assert micro_batch_bounds(t, 2, None) == [(0, 2), (2, 3)]
    plain = list(micro_batches(t, 2))
    by_bounds = list(row_slices(t, micro_batch_bounds(t, 2, None)))
    assert all(torch.equal(a[k], b[k]) for a, b in zip(plain, by_bounds) for k in a)
    # spans (1, 3), (3, 2), (1, 1): rows 0 and 1 would pad to 2 x (3 + 3) = 12; rows 1 and 2 to 2 x (3 + 2) = 10
    assert micro_batch_bounds(t, 3, 10) == [(0, 1), (1, 3)]
    assert micro_batch_bounds(t, 3, 12) == [(0, 2), (2, 3)]
    assert micro_batch_bounds(t, 1, 100) == [(0, 1), (1, 2), (2, 3)]  # micro_batch_size still bounds the rows


@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    extra=st.integers(0, 20),
)
def test_splitting_to_a_count_keeps_order_and_only_shrinks_micro_batches(sizes, extra):
    ends = np.cumsum(sizes).tolist()
    bounds = list(zip([0, *ends[:-1]], ends))
    count = min(len(bounds) + extra, ends[-1])
    split = split_to_count(bounds, count)
    assert len(split) == count
    assert [i for start, end in split for i in range(start, end)] == list(range(ends[-1]))
    # each new range lies inside one of the old ones, so it holds no more tokens than the old one did
    assert all(any(s >= a and e <= b for a, b in bounds) for s, e in split)
    with pytest.raises(ValueError):
        split_to_count(bounds, ends[-1] + 1)


class _TwoRanks:
    """An accelerator stand-in whose other rank packed its rows into `other` micro-batches."""

    num_processes, device = 2, "cpu"

    def __init__(self, other: int | None):
        self.other = other

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        assert self.other is not None, "no collective is needed without a token budget"
        return torch.cat([tensor, torch.tensor([self.other])])


def test_ranks_agree_on_the_number_of_micro_batches():
    from agentrl.train.update import micro_batch_bounds as agreed_bounds

    t = token_tensors(_batch(), length_order(_batch()), PAD, padding=1)
    t["advantages"] = torch.tensor([1.0, 2.0, 0.0])
    assert agreed_bounds(t, 3, 10, _TwoRanks(other=3)) == [(0, 1), (1, 2), (2, 3)]  # this rank packed 2: split
    assert agreed_bounds(t, 3, 10, _TwoRanks(other=1)) == [(0, 1), (1, 3)]  # the other rank splits instead
    assert agreed_bounds(t, 2, None, _TwoRanks(other=None)) == [(0, 2), (2, 3)]  # by rows: equal already
