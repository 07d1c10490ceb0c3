"""The trainer's vLLM hooks: the engine's dtype and weight sync on each build, and TRL's importance-sampling keys.

A mixin of `AgentTrainer` (agentrl/train/trainer.py), in front of TRL's GRPOTrainer. TRL owns the engine
(colocate or server); agentrl gives it the trainer's precision, replaces its colocated weight sync on vLLM's
CPU build (agentrl/rollout/vllm_engine.py), and builds the keys of TRL's vLLM/trainer mismatch correction
from the rows' behaviour log-probs. It also logs how far the engine's log-probs are from the trainer's
(`rollout/vllm_logp_gap_mean`, `_max`): with the weights in sync and the same precision, a few 1e-6.

With rows generated ahead (`rollout.max_staleness >= 1`, agentrl/train/async_hooks.py) the rollout worker's thread
generates on the colocated engine too, each job on its own weights' snapshot. The engine's lock
(`vllm_engine_held`) keeps the two threads apart: the worker holds it for a whole job, the trainer's thread around
each of its generations (with its weight sync) and its held-out evaluations. Loading a job's weights marks the
trainer's as not loaded, so that its next generation syncs them first.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from agentrl.rollout.batch import StepBatch
from agentrl.rollout.vllm_engine import (
    colocated_engine_options,
    engine_dtype,
    installed_vllm,
    load_colocated_weights,
    reload_colocated_weights,
)
from agentrl.train.batching import sampled_logps
from agentrl.train.vllm_options import importance_sampling_ratio


def engine_construction(args: Any, cfg: Any):
    """The context the trainer is built in: TRL's colocated engine gets the trainer's precision, compiled or not as
    rollout.vllm.enforce_eager says."""
    if not args.use_vllm:
        return nullcontext()
    return colocated_engine_options(engine_dtype(cfg.hardware.precision), bool(cfg.rollout.vllm.enforce_eager))


class VLLMHooks:
    vllm_engine_lock: threading.RLock | None = None

    def adapt_vllm_engine(self) -> None:
        """After TRL built its engine: its lock; on vLLM's CPU build, colocated weights sync through vLLM's reload."""
        if self.use_vllm:
            self.vllm_engine_lock = threading.RLock()
        if self.use_vllm and self.vllm_mode == "colocate" and installed_vllm().runs_on_cpu:
            self._sync_weights_by_reload()

    def vllm_engine_held(self) -> AbstractContextManager:
        """The engine's lock, held while generating on it or loading weights into it (a no-op without vLLM)."""
        return self.vllm_engine_lock if self.vllm_engine_lock is not None else nullcontext()

    def engine_weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights as the engine takes them (TRL's names, LoRA adapters merged as TRL merges them), as
        CPU copies: an asynchronous rollout job's snapshot."""
        return {
            name: tensor.detach().to("cpu", copy=True) for name, tensor in self.vllm_generation._iter_named_params()
        }

    def load_engine_weights(self, llm, weights: dict[str, torch.Tensor]) -> None:
        """A rollout job's snapshot into the colocated engine (the caller holds its lock). The trainer's weights are
        then no longer the engine's: its next generation on it syncs them
        (`TrainerVLLMPolicy._sync_weights_if_stale`)."""
        self._last_loaded_step = None
        tied = bool(self.accelerator.unwrap_model(self.model).config.tie_word_embeddings)
        load_colocated_weights(llm, iter(weights.items()), tied, installed_vllm().runs_on_cpu)

    def _sync_weights_by_reload(self) -> None:
        """TRL's per-parameter weight sync cannot work on the CPU build (`rollout/vllm_engine.py`): the same
        weights, named and merged by TRL (LoRA adapters merged in), go through vLLM's reload."""
        generation = self.vllm_generation
        tied = bool(self.accelerator.unwrap_model(self.model).config.tie_word_embeddings)

        def sync_weights() -> None:
            reload_colocated_weights(generation.llm, generation._iter_named_params(), tied)

        generation.sync_weights = sync_weights

    @torch.no_grad()
    def _vllm_importance_keys(self, batch: StepBatch, order: list[int], padding: int, out: dict) -> dict:
        """TRL's keys for its vLLM/trainer mismatch correction: the sampler's log-probs, the trainer's, the ratio.

        Replayed rows (ARPO) get no sampler log-probs (NaN, ratio 1): their staleness is what
        algo.replay.importance_correction is for."""
        width = out["completion_ids"].size(1)
        sampling = sampled_logps(batch, order, width, padding, missing=float("nan"), skip_replayed=True)
        sampling = sampling.to(out["completion_mask"].device)
        current = self._logps_of(self.model, out)
        self.iteration_metrics.update(self._logp_gap(current, sampling, out["completion_mask"]))
        ratio = importance_sampling_ratio(
            current,
            sampling,
            out["completion_mask"],
            self.vllm_importance_sampling_mode,
            self.vllm_importance_sampling_clip_min,
            self.vllm_importance_sampling_clip_max,
        )
        keys = {"sampling_per_token_logps": torch.nan_to_num(sampling, nan=0.0), "importance_sampling_ratio": ratio}
        if "old_per_token_logps" not in out:  # ARPO's importance correction sets its own
            keys["old_per_token_logps"] = current
        return keys

    def _logp_gap(self, current: torch.Tensor, sampling: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
        """|trainer log-prob - vLLM log-prob| over every rank's sampled tokens: its mean and its max."""
        known = mask.bool() & torch.isfinite(sampling)
        gap = (current - sampling).abs()[known]
        local = torch.stack(
            [gap.sum(), torch.tensor(float(gap.numel())), gap.max() if gap.numel() else torch.tensor(0.0)]
        ).to(self.accelerator.device, torch.float64)
        every = self.accelerator.gather(local[None]) if self.accelerator.num_processes > 1 else local[None]
        tokens = float(every[:, 1].sum())
        if tokens == 0:
            return {}
        return {
            "rollout/vllm_logp_gap_mean": float(every[:, 0].sum()) / tokens,
            "rollout/vllm_logp_gap_max": float(every[:, 2].max()),
        }
