"""`AgentTrainer`: TRL's GRPOTrainer, fed with multi-turn step rows and updated on verl-agent's schedule.

It keeps TRL's training loop, model handling and checkpoints, and overrides (docs/architecture.md, "TRL
integration"):
- `_generate_and_score_completions` runs one iteration's work (`agentrl/train/iteration.py`: tasks,
  the lockstep rollout through the trainer's own model, ARPO replay, advantages, metrics) and
  returns TRL's batch dict (one row per agent turn, in training order);
- `training_step` collects once per iteration, then takes one optimizer step per PPO mini-batch
  (`trainer.mini_batch_size` rows over all ranks) and epoch (`trainer.epochs`), each over micro-batches,
  against old log-probabilities taken once before the first step, as verl's `update_policy` does (the schedule:
  `MiniBatchSchedule`, agentrl/train/schedule.py; the log-prob passes: `LogProbPasses`, agentrl/train/logprobs.py);
- `_compute_loss` is agentrl's loss (`agentrl/algos/policy_loss.py`: PPO-clip with dual clip, the clamped
  k3 KL, token- or seq-mean over the mini-batch) plus the entropy term (a bonus or EPO smoothing);
- with vLLM, `VLLMHooks` (agentrl/train/vllm_hooks.py) gives TRL's engine the trainer's precision, syncs its
  weights on vLLM's CPU build, and builds TRL's importance-sampling keys;
- `_save_checkpoint` adds agentrl's state (sampler, replay buffer, entropy history) and keeps `checkpoints/last`
  pointing at the newest complete checkpoint."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.trainer_callback import PrinterCallback
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation

from agentrl.algos.off_policy import add_totals, behaviour_weights, correction_metrics, correction_totals, reduce_totals
from agentrl.algos.policy_loss import low_var_kl, masked_total, ppo_clip_loss
from agentrl.fused_head import score_completion_only
from agentrl.models.bf16_weights import weights_in_bf16
from agentrl.models.lora import peft_config
from agentrl.rollout.batch import StepBatch
from agentrl.rollout.collector import Lockstep, PromptSpec, RolloutAbandoned, collect
from agentrl.rollout.policies import HFPolicy, SamplingSpec
from agentrl.rollout.vllm_policy import TrainerVLLMPolicy
from agentrl.train import batching, iteration, update
from agentrl.train.async_hooks import AsyncRolloutHooks
from agentrl.train.callbacks import IterationCallback, evaluates_at
from agentrl.train.checkpointing import CheckpointHooks
from agentrl.train.distributed import on_every_rank
from agentrl.train.logprobs import LogProbPasses
from agentrl.train.loss_metrics import LossStats
from agentrl.train.schedule import MiniBatchSchedule
from agentrl.train.stopping import ROLLOUT, UPDATE, IterationAbandoned, StopRequest
from agentrl.train.trl_config import grpo_config, per_device_rows
from agentrl.train.vllm_hooks import VLLMHooks, engine_construction


def _unused_reward(prompts, completions, **kwargs):
    """TRL requires a reward function; agentrl's rewards come from the environment."""
    return [0.0] * len(prompts)


class AgentTrainer(AsyncRolloutHooks, CheckpointHooks, VLLMHooks, LogProbPasses, MiniBatchSchedule, GRPOTrainer):
    def __init__(
        self,
        *,
        model,
        tokenizer,
        cfg: Any,
        suite,
        pool,
        sampler,
        tracker,
        evaluator,
        output_dir: Path,
        stop: StopRequest | None = None,
        resume_command: str | None = None,
    ):
        from datasets import Dataset

        self.cfg, self.suite, self.sampler, self.tracker, self.evaluator = cfg, suite, sampler, tracker, evaluator
        self.stop = stop if stop is not None else StopRequest(at_once=str)  # none installed: never asks to stop
        self.resume_command = resume_command  # for the one line of a full disk
        self.prompt_spec = PromptSpec(cfg.env.prompt_template, cfg.env.history_length)
        self.iteration_metrics: dict[str, float] = {}
        self.last_eval: dict[str, float] = {}
        self.pool = pool  # environments, one slot per episode, reused across iterations
        self.replay = iteration.make_replay_buffer(cfg)
        self.entropy_reg = iteration.make_entropy_regularizer(cfg)
        self.loss_stats = LossStats()
        self.off_policy_totals = None  # decoupled PPO's totals over the iteration (rollout.max_staleness >= 1)
        self.nonfinite_in_a_row = self.nonfinite_total = 0
        rows = max(8, per_device_rows(cfg) * cfg.hardware.num_processes)  # at least one of TRL's batches
        placeholder = Dataset.from_dict({"prompt": ["(tasks come from the environment sampler)"] * rows})
        args = grpo_config(cfg, output_dir)
        score_completion_only()  # TRL's fused head: the completion's positions only, on a CPU too (fused_head.py)
        with engine_construction(args, cfg):
            super().__init__(
                model=model,
                reward_funcs=[_unused_reward],
                args=args,
                train_dataset=placeholder,
                processing_class=tokenizer,
                peft_config=peft_config(cfg.model.lora),
            )
        self.adapt_vllm_engine()
        self.remove_callback(PrinterCallback)  # metrics go through the tracker, not raw dicts on stdout
        self.add_callback(IterationCallback(self))

    # ------------------------------------------------------------------ rollout -> TRL batch

    def _generate_and_score_completions(self, inputs):
        """One iteration's rows as TRL's batch dict: tasks, rollout, replay and advantages (iteration.py),
        then tensors in training order, and the old and reference log-probs the update needs."""
        started = time.time()
        number = self.state.global_step + 1
        rank, ranks = self.accelerator.process_index, self.accelerator.num_processes
        if self.max_staleness:  # generated ahead, by an older version (async_hooks.py)
            job = self.rollout_ahead(number, rank, ranks)
            tasks, batch = job.tasks, job.batch
            iteration.record_tasks(Path(self.args.output_dir).parent, number, rank, tasks)
        else:
            tasks = iteration.sample_tasks(self.cfg, self.sampler, rank, ranks)
            iteration.record_tasks(Path(self.args.output_dir).parent, number, rank, tasks)
            batch = self._rollout(tasks, self.cfg.trainer.group_size, lockstep=self._lockstep)
        scored = iteration.score_rollout(self.cfg, batch, self.replay, self.all_ranks, number)
        self.iteration_metrics.update(scored.metrics)
        out = self._to_tensors(scored.batch, scored.advantages)
        self._add_policy_logps(out)
        self.iteration_metrics["rollout/completion_tokens"] = float(out["completion_mask"].sum())
        self.iteration_metrics["time/rollout_s"] = time.time() - started
        return out

    def all_ranks(self, items: list) -> list:
        """Every rank's items, in rank order (a collective when there are several ranks)."""
        if self.accelerator.num_processes == 1:
            return list(items)
        from accelerate.utils import gather_object

        return gather_object(list(items))

    def sampling_spec(self) -> SamplingSpec:
        """How rollouts sample (`rollout.*`): the trainer's own and the asynchronous worker's."""
        r = self.cfg.rollout
        return SamplingSpec(r.temperature, r.top_p, r.max_new_tokens, r.max_prompt_tokens)

    def _rollout(self, tasks, group_size: int, lockstep: Lockstep | None = None) -> StepBatch:
        cfg = self.cfg
        sampling = self.sampling_spec()
        if self.use_vllm:  # TRL's engine (colocate or server); TRL syncs the weights into it
            policy = TrainerVLLMPolicy(
                self, sampling, eos_token_ids=self.eos_token_ids, engine_lock=self.vllm_engine_held()
            )
            return collect(
                self.suite,
                tasks,
                group_size,
                policy,
                self.prompt_spec,
                max_steps=cfg.env.max_steps,
                pool=self.pool,
                lockstep=lockstep,
            )
        with self.generation_model() as unwrapped:
            interrupt = self.stop.wanted if lockstep is not None else None
            policy = HFPolicy(unwrapped, self.processing_class, sampling, self.eos_token_ids, interrupt=interrupt)
            return collect(
                self.suite,
                tasks,
                group_size,
                policy,
                self.prompt_spec,
                max_steps=cfg.env.max_steps,
                pool=self.pool,
                lockstep=lockstep,
                turns=cfg.rollout.turns,
            )

    def _lockstep(self, going: bool) -> tuple[bool, bool]:
        """Before each rollout turn, every rank's say: (whether any rank plays on, whether any asks to stop)."""
        wanted = self.stop.wanted()
        if self.accelerator.num_processes == 1:
            return going, wanted
        flags = torch.tensor([float(going), float(wanted)], device=self.accelerator.device)
        flags = self.accelerator.reduce(flags, reduction="sum")
        return bool(flags[0] > 0), bool(flags[1] > 0)

    def _collect_iteration(self, inputs) -> dict[str, Any]:
        """The iteration's rollout phase (generation, scoring, the old and reference log-probs).

        A stop during it abandons it (agentrl/train/stopping.py): the state the iteration began with is put back,
        the previous iteration's checkpoint is made sure of, and `IterationAbandoned` ends the run."""
        number = self.state.global_step + 1
        self.stop.enter(ROLLOUT, number)
        start = self.iteration_start()
        try:
            batch = self._generate_and_score_completions(inputs)
            # from here on, a stop lets the update (and its evaluation, where one is due) finish
            self.stop.enter(UPDATE, number, evaluates_at(number, self.cfg.trainer.eval_every, self.state.max_steps))
            if self._lockstep(False)[1]:  # a stop that came during the log-prob passes
                raise RolloutAbandoned("after the rollout")
        except RolloutAbandoned:
            self.drop_jobs_of_abandoned_iteration(number)
            raise IterationAbandoned(number - 1, self.checkpoint_iteration_start(start)) from None
        return batch

    def evaluate(self) -> dict[str, float]:
        """Held-out evaluation with the full weights (ZeRO-3 gathers them); each rank plays its share of the tasks.
        `time/eval_s` is its wall time (an evaluation of 64 tasks can take longer than an iteration)."""
        started = time.perf_counter()
        # not while an asynchronous rollout worker generates on vLLM: its CPU sampler moves torch's global stream,
        # which the evaluation samples from (agentrl/rollout/vllm_seeded.py)
        with self.vllm_engine_held(), self.generation_model() as unwrapped:
            if self.accelerator.num_processes == 1:
                metrics = self.evaluator(unwrapped)
            else:
                metrics = self.evaluator(
                    unwrapped, self.accelerator.process_index, self.accelerator.num_processes, gather=self.all_ranks
                )
        return {**metrics, "time/eval_s": time.perf_counter() - started}

    def evaluation_episodes(self) -> int:
        """The episodes of one held-out evaluation, over every rank."""
        return len(self.evaluator.tasks) * self.cfg.eval.episodes_per_task

    @contextlib.contextmanager
    def generation_model(self):
        """The model HF generation runs on, for a rollout or an evaluation: unwrapped (ZeRO-3 gathers the full
        weights), under the run's autocast (bf16 on a CPU, where the forward has no autocast of its own), and with
        `rollout.generate_in_bf16` on its weights' bfloat16 rounding (models/bf16_weights.py), the fp32 ones given
        back after."""
        unwrap = unwrap_model_for_generation(
            self.model_wrapped, self.accelerator, gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs
        )
        with unwrap as unwrapped, self.accelerator.autocast():
            rounded = weights_in_bf16(unwrapped) if self.cfg.rollout.generate_in_bf16 else contextlib.nullcontext()
            with rounded:
                yield unwrapped

    def filter_tasks(self) -> None:
        """ARPO's optional task selection by the base policy (a no-op unless configured)."""
        iteration.filter_tasks(self.cfg, self.suite, self.sampler, self._rollout)

    def _to_tensors(self, batch: StepBatch, advantages: np.ndarray) -> dict[str, Any]:
        """TRL's batch dict: the rows in training order (`mini_batch_order`), then this rank's padding rows
        (see `_rows_to_pad`)."""
        device = self.accelerator.device
        order = batching.mini_batch_order(batch, self.rows_per_mini_batch())
        padding = self._rows_to_pad(len(order))
        out = batching.token_tensors(batch, order, self.processing_class.pad_token_id, padding)
        out["advantages"] = batching.padded_rows(advantages[order], padding)
        out["is_real_row"] = batching.padded_rows(np.ones(len(order)), padding)
        if self.cfg.algo.replay.importance_correction:
            out["old_per_token_logps"] = batching.sampled_logps(batch, order, out["completion_ids"].size(1), padding)
        if self.max_staleness:  # decoupled PPO's behaviour policy: the rollout's own log-probs (NaN: replayed rows)
            width = out["completion_ids"].size(1)
            out["behaviour_per_token_logps"] = batching.sampled_logps(
                batch, order, width, padding, missing=float("nan"), skip_replayed=True
            )
        if self.entropy_reg is not None:
            tokens = out["completion_mask"][: len(order)].sum(dim=1).numpy()
            episodes = np.asarray(batch.episode)[order]
            weights = batching.entropy_row_weights(
                episodes, tokens, self.mini_batch_rows(len(order)), self.cfg.algo.entropy
            )
            out["entropy_row_weight"] = batching.padded_rows(weights, padding)
        out = {k: v.to(device) for k, v in out.items()}
        if self.use_vllm and self.vllm_importance_sampling_correction:
            out.update(self._vllm_importance_keys(batch, order, padding, out))
        return out

    # ------------------------------------------------------------------ the loss of one micro-batch

    def _compute_loss(self, model, inputs):
        """One micro-batch's share of its mini-batch's loss (docs/algorithms.md, "How the loss is assembled").

        Per token: PPO-clip with dual clip against the old log-probabilities (the current ones, detached,
        when the iteration takes one step), times decoupled PPO's behaviour weight for rows generated ahead, else
        times TRL's vLLM/trainer ratio when that correction is on, plus beta times the clamped k3 KL. The total over
        the micro-batch (`masked_total`) is divided by the mini-batch's tokens or rows over every rank, times the
        ranks (DDP averages the gradients), so the micro-batch losses add up to the mini-batch's token- or
        seq-mean. Then the entropy term, if any."""
        algo = self.cfg.algo
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        mask = inputs["completion_mask"]
        logps, entropies = self._token_logps(model, ids, attention, mask.size(1), entropies=True)
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        clip_high = algo.clip_epsilon_high if algo.clip_epsilon_high is not None else algo.clip_epsilon
        policy = ppo_clip_loss(logps, old, inputs["advantages"], algo.clip_epsilon, clip_high, algo.dual_clip)
        per_token = policy.per_token
        if "behaviour_per_token_logps" in inputs:  # rows generated ahead: decoupled PPO, with `old` the proximal
            # the behaviour weight corrects all of sampler -> proximal, a vLLM/trainer mismatch included: TRL's vLLM
            # ratio on top would count that mismatch twice (docs/algorithms.md, "Off-policy correction")
            per_token = per_token * self._behaviour_weights(old, inputs["behaviour_per_token_logps"], mask)
        elif self.use_vllm and self.vllm_importance_sampling_correction:
            per_token = per_token * inputs["importance_sampling_ratio"]
        kl = None
        if self.beta != 0.0:
            kl = low_var_kl(logps, inputs["ref_per_token_logps"], algo.kl_clamp)
            per_token = per_token + self.beta * kl
        aggregation = algo.loss_aggregation
        count = inputs["num_items_in_batch"] if aggregation == "token_mean" else inputs["num_rows_in_batch"]
        loss = masked_total(per_token, mask, aggregation) * self.accelerator.num_processes / count.clamp(min=1)
        self.loss_stats.add(mask, entropies, policy, kl)
        if self.entropy_reg is not None and model.training:
            loss = loss + self.entropy_reg.loss_term(
                entropies, mask, inputs["entropy_row_weight"], iteration=self.state.global_step
            )
        return loss

    def _behaviour_weights(self, proximal, behaviour, mask):
        """Decoupled PPO's per-token weight pi_prox / pi_behav (agentrl/algos/off_policy.py), its totals kept for
        the iteration's `off_policy/*` metrics. A replayed row (no behaviour log-probs of this rollout) is trained
        as ARPO trains it: weight 1."""
        behaviour = torch.where(torch.isnan(behaviour), proximal, behaviour)
        result = behaviour_weights(proximal, behaviour, mask, self.cfg.algo.off_policy.weight_cap)
        self.off_policy_totals = add_totals(
            self.off_policy_totals, correction_totals(result.weights, result.kept, mask)
        )
        return result.weights

    # ------------------------------------------------------------------ one iteration: its optimizer steps

    def training_step(self, model, inputs, num_items_in_batch=None):
        """Collect one iteration, then take one optimizer step per mini-batch and epoch (`update.update_policy`).

        Every step happens here; TRL's own step after this call finds no gradient, so it only advances the
        learning-rate schedule and `global_step` (one per iteration) and logs."""
        model.train()
        batch = self._collect_iteration(inputs)
        started = time.time()
        self.loss_stats = LossStats()
        self.off_policy_totals = None
        minis = self._mini_batches(batch) if self._can_update(model, batch) else []
        if self.skips_rows_without_advantage() and minis:
            computed = sum(mini["advantages"].shape[0] for mini in minis)
            self.iteration_metrics["train/rows_computed"] = computed / batch["advantages"].shape[0]
        result = update.update_policy(
            model,
            self.optimizer,
            self.accelerator,
            minis * self.cfg.trainer.epochs,
            micro_batch_size=self.cfg.trainer.micro_batch_size,
            micro_batch_tokens=self.cfg.trainer.micro_batch_tokens,
            max_grad_norm=self.args.max_grad_norm,
            loss_of=self._compute_loss,
            loss_context=self.compute_loss_context_manager,
            accept=lambda finite, which: self._accept_update(model, finite, which),
        )
        self._end_iteration_metrics(result, time.time() - started)
        if not result.losses:
            return torch.zeros((), device=self.accelerator.device)
        return torch.stack(result.losses).mean()

    def _can_update(self, model, batch: dict[str, Any]) -> bool:
        """Whether the iteration has rows and every rank's advantages are finite (if not, that skip is counted)."""
        if not batch["advantages"].numel():
            return False
        if not on_every_rank(self.accelerator, bool(torch.isfinite(batch["advantages"]).all())):
            return self._accept_update(model, False)
        return True

    def _end_iteration_metrics(self, result: update.UpdateResult, update_s: float) -> None:
        """The update's metrics; EPO's entropy history takes the iteration's mean entropy over every rank's tokens
        (and only whole iterations: one skipped step discards it)."""
        stepped = result.losses or result.skipped
        if self.entropy_reg is not None and stepped:
            if result.skipped:
                self.entropy_reg.discard_iteration()
            else:
                totals = torch.tensor(
                    self.entropy_reg.pending_totals(), dtype=torch.float64, device=self.accelerator.device
                )
                totals = self.accelerator.reduce(totals, reduction="sum")
                self.iteration_metrics.update(self.entropy_reg.end_iteration(float(totals[0]), float(totals[1])))
        self.iteration_metrics.update(self.loss_stats.reduce(self.accelerator))
        if self.off_policy_totals is not None:
            self.iteration_metrics.update(correction_metrics(reduce_totals(self.off_policy_totals, self.accelerator)))
        self.iteration_metrics["train/optimizer_steps"] = float(len(result.grad_norms))
        if result.grad_norms:
            self.iteration_metrics["train/grad_norm"] = float(np.mean(result.grad_norms))
        self.iteration_metrics["time/update_s"] = update_s

    def _accept_update(self, model, finite: bool, which: str = "") -> bool:
        """`update.accept_step` with this run's counts of non-finite updates."""
        skips = update.Skips(self.nonfinite_in_a_row, self.nonfinite_total)
        where = f"iteration {self.state.global_step + 1}{', ' + which if which else ''}"
        limit = self.cfg.trainer.max_nonfinite_updates
        accepted = update.accept_step(model, self.accelerator, finite, skips, limit, where)
        self.nonfinite_in_a_row, self.nonfinite_total = skips.in_a_row, skips.total
        if not accepted:
            self.iteration_metrics["train/skipped_updates"] = float(skips.total)
        return accepted
