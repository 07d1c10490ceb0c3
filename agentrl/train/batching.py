"""Step rows -> the tensors of TRL's batch dict, and the mini- and micro-batches an iteration is cut into.

Pure tensor work with no model and no collectives: the trainer decides how many rows of padding a
rank needs (so that every rank runs the same micro-batches) and where the tensors go.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agentrl.errors import UserError
from agentrl.rollout.batch import StepBatch

PROMPT_KEYS = ("prompt_ids", "prompt_mask")
COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "ref_per_token_logps",
    "old_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "behaviour_per_token_logps",  # rows generated ahead (rollout.max_staleness >= 1): decoupled PPO's behaviour
)


def length_order(batch: StepBatch, rows: list[int] | None = None) -> list[int]:
    """Row indices (all, or `rows`) sorted by prompt + completion length: neighbours pad less in a micro-batch."""
    rows = range(len(batch)) if rows is None else rows
    return sorted(rows, key=lambda i: len(batch.prompt_ids[i]) + len(batch.completion_ids[i]))


def episode_order(batch: StepBatch) -> list[int]:
    """Row indices in the reference's order: episode after episode, each episode's turns in order.

    verl-agent's `gather_rollout_data` lays the rows out this way, and `update_policy` cuts PPO
    mini-batches as consecutive slices of it."""
    return sorted(range(len(batch)), key=lambda i: (batch.episode[i], batch.step[i]))


def mini_batch_order(batch: StepBatch, rows_per_mini_batch: int | None) -> list[int]:
    """The training order of the rows: consecutive slices of `episode_order` form the mini-batches, and
    inside each the rows are sorted by length (the loss of a mini-batch does not depend on its row order).
    None: one mini-batch of every row."""
    if rows_per_mini_batch is None:
        return length_order(batch)
    rows = episode_order(batch)
    size = rows_per_mini_batch
    return [i for start in range(0, len(rows), size) for i in length_order(batch, rows[start : start + size])]


def token_tensors(batch: StepBatch, order: list[int], pad_id: int, padding: int = 0) -> dict[str, torch.Tensor]:
    """Left-padded prompts and right-padded completions with their masks, in `order`, then `padding` rows
    that weigh nothing: one attended pad token of prompt (an all-masked row would give NaN attention) and a
    completion whose mask is all zero."""
    prompts = [batch.prompt_ids[i] for i in order]
    completions = [batch.completion_ids[i] for i in order]
    rows = len(order) + padding
    p_width = max((len(p) for p in prompts), default=1)
    c_width = max((len(c) for c in completions), default=1)
    out = {
        "prompt_ids": torch.full((rows, p_width), pad_id, dtype=torch.long),
        "prompt_mask": torch.zeros((rows, p_width), dtype=torch.long),
        "completion_ids": torch.full((rows, c_width), pad_id, dtype=torch.long),
        "completion_mask": torch.zeros((rows, c_width), dtype=torch.long),
    }
    for row, (p, c) in enumerate(zip(prompts, completions)):
        out["prompt_ids"][row, p_width - len(p) :] = torch.tensor(p, dtype=torch.long)
        out["prompt_mask"][row, p_width - len(p) :] = 1
        out["completion_ids"][row, : len(c)] = torch.tensor(c, dtype=torch.long)
        out["completion_mask"][row, : len(c)] = 1
    out["prompt_mask"][len(order) :, -1] = 1
    return out


def padded_rows(values: np.ndarray, padding: int) -> torch.Tensor:
    """Per-row values (advantages, weights) followed by zeros for the padding rows, as float32."""
    return torch.tensor(np.concatenate([values, np.zeros(padding)]), dtype=torch.float32)


def sampled_logps(
    batch: StepBatch,
    order: list[int],
    width: int,
    padding: int = 0,
    *,
    missing: float | None = None,
    skip_replayed: bool = False,
) -> torch.Tensor:
    """(rows + padding, width) log-probs of the sampled tokens as the generator gave them, right-padded with 0.

    A row without log-probs (or a replayed row, with `skip_replayed`) is filled with `missing`; with
    `missing=None` such a row is an error (the PPO ratio of replayed rows cannot do without them)."""
    fill = 0.0 if missing is None else missing
    logps = torch.full((len(order) + padding, width), fill, dtype=torch.float32)
    logps[len(order) :] = 0.0
    for row, i in enumerate(order):
        values = batch.logprobs[i]
        if values is None or (skip_replayed and batch.replayed[i]):
            if missing is None:
                raise UserError(
                    "algo.replay.importance_correction=true needs behaviour log-probs, and this generator gives none"
                )
            continue
        logps[row] = 0.0
        logps[row, : len(values)] = torch.tensor(values, dtype=torch.float32)
    return logps


ZERO_ADVANTAGE = 1e-9  # |A| at or below this is 0: a group of equal returns leaves at most rounding residue


def rows_with_advantage(batch: dict[str, Any]) -> torch.Tensor:
    """The indices of the rows whose advantage is not 0, in order; the first row when none has one (so that a
    mini-batch still has a backward pass, whose zero gradient the optimizer steps on as it would have)."""
    rows = (batch["advantages"].abs() > ZERO_ADVANTAGE).nonzero().flatten()
    return rows if len(rows) else torch.arange(min(1, batch["advantages"].shape[0]))


def select_rows(batch: dict[str, Any], rows: torch.Tensor | slice) -> dict[str, Any]:
    """The batch's `rows` (an index tensor, in its order, or a slice). Scalars (0-dim tensors, numbers) are passed
    through."""
    return {k: (v[rows] if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in batch.items()}


def micro_batches(batch: dict[str, Any], size: int, trim: bool = True):
    """Row slices of the batch (mini-batches, or micro-batches of one); with `trim`, padding columns that
    no row of the slice uses are dropped. Scalars (0-dim tensors, numbers) are passed through."""
    yield from row_slices(batch, micro_batch_bounds(batch, size, None), trim)


def row_slices(batch: dict[str, Any], bounds: list[tuple[int, int]], trim: bool = True):
    """The batch's rows [start, end) for each of `bounds`, in order; with `trim`, padding columns that no row of
    the slice uses are dropped. Scalars (0-dim tensors, numbers) are passed through."""
    for start, end in bounds:
        micro = select_rows(batch, slice(start, end))
        if trim:
            used_p = micro["prompt_mask"].any(dim=0).nonzero()
            used_c = micro["completion_mask"].any(dim=0).nonzero()
            p_from = int(used_p[0]) if len(used_p) else micro["prompt_mask"].size(1) - 1
            c_to = int(used_c[-1]) + 1 if len(used_c) else 1
            for k in PROMPT_KEYS:
                micro[k] = micro[k][:, p_from:]
            for k in COMPLETION_KEYS:
                if k in micro:
                    micro[k] = micro[k][:, :c_to]
        yield micro


def row_spans(batch: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's prompt span (from its first attended column to the end: prompts are left-padded) and completion
    span (up to its last attended column: completions are right-padded), the columns a trimmed slice keeps for it."""
    prompt = batch["prompt_mask"].bool()
    completion = batch["completion_mask"].bool()
    width = prompt.size(1)
    first = torch.where(prompt.any(dim=1), prompt.int().argmax(dim=1), width - 1)
    last = completion.size(1) - completion.flip(dims=[1]).int().argmax(dim=1)
    last = torch.where(completion.any(dim=1), last, 1)
    return (width - first).cpu().numpy(), last.cpu().numpy()


def token_budget_bounds(
    prompt_spans: np.ndarray, completion_spans: np.ndarray, max_rows: int, max_tokens: int
) -> list[tuple[int, int]]:
    """Consecutive row ranges [start, end) that cover every row once, in order, each of at most `max_rows` rows and
    at most `max_tokens` tokens as a trimmed slice pads them (rows x (longest prompt + longest completion)). A row
    that alone exceeds the budget gets a range of its own. Greedy: rows sorted by length pack tightly."""
    bounds: list[tuple[int, int]] = []
    start, longest_prompt, longest_completion = 0, 0, 0
    for row, (prompt, completion) in enumerate(zip(prompt_spans, completion_spans)):
        wider_prompt, wider_completion = max(longest_prompt, prompt), max(longest_completion, completion)
        rows = row - start + 1
        if row > start and (rows > max_rows or rows * (wider_prompt + wider_completion) > max_tokens):
            bounds.append((start, row))
            start, wider_prompt, wider_completion = row, prompt, completion
        longest_prompt, longest_completion = wider_prompt, wider_completion
    if len(prompt_spans):
        bounds.append((start, len(prompt_spans)))
    return bounds


def split_to_count(bounds: list[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    """`bounds` split further until there are `count` ranges (at most one per row): the range with the most rows is
    halved each time, which keeps every range within the budget it was packed to. Ranks agree on a count this way,
    since each forward and backward pass is a collective under DDP, ZeRO and FSDP."""
    bounds = list(bounds)
    rows = bounds[-1][1] - bounds[0][0] if bounds else 0
    if count > rows:
        raise ValueError(f"cannot split {rows} rows into {count} micro-batches")
    while len(bounds) < count:
        widest = max(range(len(bounds)), key=lambda i: bounds[i][1] - bounds[i][0])
        start, end = bounds[widest]
        middle = start + (end - start) // 2
        bounds[widest : widest + 1] = [(start, middle), (middle, end)]
    return bounds


def micro_batch_bounds(batch: dict[str, Any], max_rows: int, max_tokens: int | None) -> list[tuple[int, int]]:
    """The row ranges of a batch's micro-batches: `max_rows` rows each (`trainer.micro_batch_size`), and with
    `max_tokens` (`trainer.micro_batch_tokens`) packed to that many tokens, padding included."""
    rows = batch["advantages"].shape[0]
    if max_tokens is None:
        return [(start, min(start + max_rows, rows)) for start in range(0, rows, max_rows)]
    return token_budget_bounds(*row_spans(batch), max_rows, max_tokens)


def entropy_row_weights(episodes: np.ndarray, tokens: np.ndarray, rows_per_mini_batch: int, entropy: Any) -> np.ndarray:
    """The entropy term's row weights (`algo.entropy.aggregation`), normalised within each mini-batch of rows in
    training order: each optimizer step's term is a mean over its own mini-batch."""
    from agentrl.algos.entropy import row_weights

    aggregation = entropy.aggregation
    parts = [
        row_weights(
            episodes[start : start + rows_per_mini_batch], tokens[start : start + rows_per_mini_batch], aggregation
        )
        for start in range(0, len(episodes), rows_per_mini_batch)
    ]
    return np.concatenate(parts) if parts else np.zeros(0)
