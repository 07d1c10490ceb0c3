"""The trainer's log-probability passes: the PPO ratio's old log-probabilities and the KL reference's, taken once
before an iteration's first optimizer step, over the same micro-batches as the update, through TRL's own pass.

A mixin of `AgentTrainer` (agentrl/train/trainer.py), in front of TRL's GRPOTrainer: it reads the trainer's model,
reference model, accelerator and config, and calls TRL's private `_get_per_token_logps_and_entropies` (`_token_logps`
is the one place that does, so that a TRL upgrade changes one call)."""

from __future__ import annotations

from typing import Any

import torch

from agentrl.train import batching, update


class LogProbPasses:
    def _add_policy_logps(self, batch: dict[str, Any]) -> None:
        """Before the first step: the old log-probabilities when the iteration takes several steps (else the
        ratio's denominator is the current policy, detached), and the KL reference's when the KL term is on.
        Old ones already there (ARPO's behaviour log-probs, vLLM's trainer-side ones) are kept."""
        rows = batch["advantages"].shape[0]
        if "old_per_token_logps" not in batch and self.optimizer_steps_per_iteration(rows) > 1:
            batch["old_per_token_logps"] = self._old_logps(batch)  # the policy that generated the rows
        # (where the update skips rows without advantage, so does this pass: their old log-probs stay 0, unread)
        if self.beta != 0.0 and rows:
            batch["ref_per_token_logps"] = self._reference_logps(batch)

    @torch.no_grad()
    def _old_logps(self, batch: dict[str, Any]) -> torch.Tensor:
        """The PPO ratio's old log-probabilities, taken once before the first update (verl's
        `compute_log_prob`), in eval mode as the reference does (no dropout)."""
        was_training = self.model.training
        self.model.eval()
        try:
            if not self.skips_rows_without_advantage():
                return self._logps_of(self.model, batch)
            rows = batching.rows_with_advantage(batch)
            computed = self._logps_of(self.model, batching.select_rows(batch, rows))
            logps = computed.new_zeros((batch["completion_ids"].size(0), computed.size(1)))
            logps[rows] = computed
            return logps
        finally:
            self.model.train(was_training)

    @torch.no_grad()
    def _reference_logps(self, batch: dict[str, Any]) -> torch.Tensor:
        """The KL reference's log-probs: the frozen copy, or with LoRA the base model (adapter disabled, as TRL does)."""
        if self.ref_model is not None:
            return self._logps_of(self.ref_model, batch)
        from trl.trainer.utils import use_adapter

        peft_model = self.accelerator.unwrap_model(self.model)
        with use_adapter(peft_model, adapter_name="ref" if "ref" in peft_model.peft_config else None):
            return self._logps_of(self.model, batch)

    def _logps_of(self, model, batch: dict[str, Any]) -> torch.Tensor:
        """Every row's completion log-probs, (rows, the batch's completion width), over the same micro-batches as
        the update. With a token budget each micro-batch is trimmed to its own columns (the budget counts those) and
        its log-probs padded back with zeros, which the completion mask leaves out; without one, untrimmed."""
        t = self.cfg.trainer
        budget = t.micro_batch_tokens
        width = batch["completion_ids"].size(1)
        bounds = update.micro_batch_bounds(batch, t.micro_batch_size, budget, self.accelerator)
        chunks = []
        for micro in batching.row_slices(batch, bounds, trim=budget is not None):
            ids = torch.cat([micro["prompt_ids"], micro["completion_ids"]], dim=1)
            mask = torch.cat([micro["prompt_mask"], micro["completion_mask"]], dim=1)
            logps, _ = self._token_logps(model, ids, mask, micro["completion_ids"].size(1))
            chunks.append(torch.nn.functional.pad(logps, (0, width - logps.size(1))))
        return torch.cat(chunks, dim=0)

    def _token_logps(self, model, ids, attention, completion_tokens: int, entropies: bool = False):
        """Each completion token's log-probability (and entropy) by TRL's pass (private in 1.16: called here alone)."""
        logps, token_entropies, _ = self._get_per_token_logps_and_entropies(
            model, ids, attention, completion_tokens, compute_entropy=entropies
        )
        return logps, token_entropies
