"""One iteration's optimizer updates as plain functions, on verl's schedule (`update_policy`):

    cut_mini_batches(batch)            consecutive row slices, each with its token and row counts over every rank
    update_policy(...)                 for each mini-batch and epoch:
        accumulate_gradient(...)           the micro-batch loop: forward, the loss, backward
        clipped_grad_norm(...)             the norm before clipping (collective)
        accept_step(...)                   a non-finite loss or gradient skips the step
        optimizer.step()
    -> UpdateResult                    each accepted step's loss and gradient norm, and the skipped steps

Each function takes what it uses (model, optimizer, accelerator, batch, config values) and nothing else. The
trainer (agentrl/train/trainer.py) calls `update_policy` from `training_step`, with its `_compute_loss` (one
micro-batch's loss, from agentrl/algos/policy_loss.py) as `loss_of` and its skip counts behind `accept`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl.errors import UserError
from agentrl.train import batching
from agentrl.train.distributed import on_every_rank


def rows_per_mini_batch(mini_batch_size: int | None, ranks: int) -> int | None:
    """This rank's share of `trainer.mini_batch_size` (every rank takes an equal share); None: every row."""
    return None if mini_batch_size is None else mini_batch_size // ranks


def optimizer_steps(rows: int, mini_batch_rows: int, epochs: int) -> int:
    """Mini-batches times epochs, for `rows` rows on this rank (padding included: equal on every rank), cut into
    slices of `mini_batch_rows` (all the rows when `trainer.mini_batch_size` is null)."""
    return max(-(-rows // mini_batch_rows), 1) * epochs


def cut_mini_batches(
    batch: dict[str, Any], rows: int, accelerator, skip_rows_without_advantage: bool = False
) -> list[dict[str, Any]]:
    """Consecutive slices of `rows` rows (this rank's share of `trainer.mini_batch_size`), each with its token and
    real-row counts over every rank: the loss's denominators. Every rank has as many rows, so as many slices.

    With `skip_rows_without_advantage` each slice then keeps only its rows whose advantage is not 0
    (`batching.rows_with_advantage`), after its counts: the loss is divided by the same counts, and the rows left
    out would have added exactly 0 to it (the caller makes sure of that: no KL or entropy term)."""
    minis = list(batching.micro_batches(batch, rows, trim=False))
    counts = torch.stack([torch.stack([m["completion_mask"].sum(), m["is_real_row"].sum()]) for m in minis])
    counts = accelerator.reduce(counts.float(), reduction="sum")
    for mini, (tokens, real_rows) in zip(minis, counts):
        mini["num_items_in_batch"], mini["num_rows_in_batch"] = tokens, real_rows
    if skip_rows_without_advantage:
        minis = [batching.select_rows(mini, batching.rows_with_advantage(mini)) for mini in minis]
    return minis


def micro_batch_bounds(
    batch: dict[str, Any], micro_batch_size: int, micro_batch_tokens: int | None, accelerator
) -> list[tuple[int, int]]:
    """The row ranges of the batch's micro-batches (`trainer.micro_batch_size` rows, and `trainer.micro_batch_tokens`
    tokens when set), as many on every rank: each forward and backward pass is a collective under DDP, ZeRO and
    FSDP, so a rank whose rows pack into fewer micro-batches splits its largest ones (collective with a budget)."""
    bounds = batching.micro_batch_bounds(batch, micro_batch_size, micro_batch_tokens)
    if micro_batch_tokens is None or accelerator.num_processes == 1:
        return bounds  # by rows alone: every rank has as many rows, so as many micro-batches
    counts = accelerator.gather(torch.tensor([len(bounds)], device=accelerator.device))
    return batching.split_to_count(bounds, int(counts.max()))


def accumulate_gradient(
    model,
    mini: dict[str, Any],
    micro_batch_size: int | None,
    micro_batch_tokens: int | None,
    accelerator,
    loss_of: Callable[[Any, dict[str, Any]], torch.Tensor],
    loss_context: Callable[[], AbstractContextManager],
) -> tuple[torch.Tensor, bool]:
    """Forward and backward passes over one mini-batch's micro-batches: (its loss, whether it is finite). How the
    rows are split does not change the sum: each micro-batch's loss is already divided by the whole mini-batch's
    token or row count (`num_items_in_batch`, `num_rows_in_batch`)."""
    total = torch.zeros((), device=accelerator.device)
    finite = True
    bounds = micro_batch_bounds(mini, micro_batch_size, micro_batch_tokens, accelerator)
    micros = list(batching.row_slices(mini, bounds))
    for index, micro in enumerate(micros):
        # DeepSpeed steps inside backward when gradients sync: only after the mini-batch's last micro-batch.
        # accelerate (1.x) has no public setter outside its own accumulate() context, whose step counting assumes
        # equal micro-steps per optimizer step; this private one is the only one agentrl calls.
        accelerator.gradient_state._set_sync_gradients(index == len(micros) - 1)
        with loss_context():
            loss = loss_of(model, micro)
        if not torch.isfinite(loss):
            finite = False
            if accelerator.num_processes == 1:
                break
            # other ranks are in the middle of the same backward passes (gradient all-reduce):
            # go on, and let the accept/skip decision throw this update away on every rank
        accelerator.backward(loss)
        total += loss.detach()
    accelerator.gradient_state._set_sync_gradients(True)
    return total, finite


@dataclass
class UpdateResult:
    """One iteration's optimizer steps: each accepted step's loss and gradient norm (before clipping)."""

    losses: list[torch.Tensor] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    skipped: int = 0  # steps thrown away for a non-finite loss or gradient


def update_policy(
    model,
    optimizer,
    accelerator,
    minis: list[dict[str, Any]],
    *,
    micro_batch_size: int | None,
    micro_batch_tokens: int | None = None,
    max_grad_norm: float,
    loss_of: Callable[[Any, dict[str, Any]], torch.Tensor],
    loss_context: Callable[[], AbstractContextManager],
    accept: Callable[[bool, str], bool],
) -> UpdateResult:
    """One optimizer step per mini-batch, in order (`minis` holds every epoch's), as verl's `update_policy` does.

    `accept(finite, which)` is the accept/skip decision (`accept_step` with the run's counts)."""
    result = UpdateResult()
    for number, mini in enumerate(minis, start=1):
        loss, finite = accumulate_gradient(
            model, mini, micro_batch_size, micro_batch_tokens, accelerator, loss_of, loss_context
        )
        grad_norm = clipped_grad_norm(model, accelerator, max_grad_norm)  # every rank, even after a non-finite loss
        # a finite loss can still give a non-finite gradient (a NaN in an attention kernel's backward): stepping on
        # it would make every weight NaN
        if not accept(finite and math.isfinite(grad_norm), f"mini-batch {number} of {len(minis)}"):
            result.skipped += 1
            continue
        optimizer.step()
        model.zero_grad(set_to_none=True)  # TRL's step after training_step then has nothing to apply
        result.losses.append(loss)
        result.grad_norms.append(grad_norm)
    return result


def clipped_grad_norm(model, accelerator, max_grad_norm: float) -> float:
    """Clip the gradient norm to `max_grad_norm` (none when <= 0) as transformers does before its step; the norm
    before clipping (0 where the engine clips inside its own step and reports none: DeepSpeed). Collective."""
    norm = accelerator.clip_grad_norm_(model.parameters(), max_grad_norm if max_grad_norm > 0 else float("inf"))
    return 0.0 if norm is None else float(norm)


@dataclass
class Skips:
    in_a_row: int = 0  # non-finite updates since the last accepted one
    total: int = 0


def accept_step(model, accelerator, finite: bool, skips: Skips, limit: int, where: str) -> bool:
    """The accept/skip decision: a non-finite advantage, loss or gradient norm on any rank skips the update on every
    rank (the gradients are dropped, so the optimizer step has nothing to apply); `limit` in a row stop the run."""
    finite = on_every_rank(accelerator, finite)
    if finite:
        skips.in_a_row = 0
        return True
    model.zero_grad(set_to_none=True)  # params without a gradient are left alone by the optimizer step
    skips.in_a_row += 1
    skips.total += 1
    print(
        f"{where}: non-finite loss, advantage or gradient; update skipped "
        f"({skips.in_a_row} in a row, limit trainer.max_nonfinite_updates={limit})"
    )
    if skips.in_a_row >= limit:
        raise UserError(
            f"{skips.in_a_row} updates in a row had a non-finite loss, advantage or gradient "
            f"(trainer.max_nonfinite_updates={limit}); the run stops with its last checkpoint intact"
        )
    return False
