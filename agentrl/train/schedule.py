"""The trainer's mini-batch schedule: how many rows a PPO mini-batch holds on this rank, how many optimizer steps an
iteration takes, the padding rows that give every rank as many rows as the largest, and one epoch's mini-batches.

A mixin of `AgentTrainer` (agentrl/train/trainer.py); the arithmetic is agentrl/train/update.py's plain functions,
applied here to the trainer's config (`trainer.mini_batch_size`, `trainer.epochs`) and its accelerator's ranks."""

from __future__ import annotations

from typing import Any

import torch

from agentrl.train import update


class MiniBatchSchedule:
    def rows_per_mini_batch(self) -> int | None:
        """This rank's share of `trainer.mini_batch_size`; None: the whole iteration is one mini-batch."""
        return update.rows_per_mini_batch(self.cfg.trainer.mini_batch_size, self.accelerator.num_processes)

    def mini_batch_rows(self, rows: int) -> int:
        """The rows of one mini-batch on this rank, for an iteration of `rows` rows."""
        return self.rows_per_mini_batch() or max(rows, 1)

    def optimizer_steps_per_iteration(self, rows: int) -> int:
        """One step per mini-batch and epoch."""
        return update.optimizer_steps(rows, self.mini_batch_rows(rows), self.cfg.trainer.epochs)

    def _rows_to_pad(self, rows: int) -> int:
        """Rows of padding that bring this rank to the largest rank's row count, so that every rank runs the
        same number of equally sized micro-batches (TRL's loss gathers across ranks; unequal ranks hang)."""
        if self.accelerator.num_processes == 1:
            return 0
        counts = self.accelerator.gather(torch.tensor([rows], device=self.accelerator.device))
        return int(counts.max()) - rows

    def _mini_batches(self, batch: dict[str, Any]) -> list[dict[str, Any]]:
        """One epoch's mini-batches, cut and counted over ranks once; without the rows that add nothing to the loss
        where `skips_rows_without_advantage`."""
        rows = self.mini_batch_rows(batch["advantages"].shape[0])
        return update.cut_mini_batches(batch, rows, self.accelerator, self.skips_rows_without_advantage())

    def skips_rows_without_advantage(self) -> bool:
        """`trainer.skip_rows_without_advantage`, where a row whose advantage is 0 adds exactly 0 to the loss and its
        gradient (no KL term, no entropy term) and on one rank (on several, each pass is a collective: ranks would
        run different numbers of micro-batches)."""
        return (
            self.cfg.trainer.skip_rows_without_advantage
            and self.beta == 0.0
            and self.entropy_reg is None
            and self.accelerator.num_processes == 1
        )
