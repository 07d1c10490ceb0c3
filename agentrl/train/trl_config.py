"""TRL's `GRPOConfig` for agentrl's training loop: which of TRL's knobs agentrl sets, and why.

TRL's own batching is bypassed (the collector makes each iteration's batch; see docs/architecture.md),
so several values here only keep TRL's sampler and engine sizing consistent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trl import GRPOConfig

from agentrl.train.vllm_options import grpo_vllm_kwargs


def grpo_config(cfg: Any, output_dir: Path) -> GRPOConfig:
    """TRL's config: one TRL step per iteration (agentrl's training_step takes the optimizer steps inside it)."""
    hw, t, algo = cfg.hardware, cfg.trainer, cfg.algo
    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=t.iterations,
        # TRL's own batching is unused (the collector makes the batch), but its sampler needs
        # consistent numbers; gradient accumulation and steps_per_generation must stay 1, or TRL
        # silently drops rows.
        per_device_train_batch_size=per_device_rows(cfg),
        num_generations=2,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        learning_rate=t.learning_rate,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        lr_scheduler_type=str(t.lr_schedule),  # stepped once per iteration (max_steps)
        warmup_steps=0,
        beta=algo.kl_coef,  # TRL builds the frozen reference model when beta != 0
        use_bias_correction_kl=False,  # unused by agentrl's loss; verl's KL term has no ratio weighting
        epsilon=algo.clip_epsilon,
        epsilon_high=algo.clip_epsilon_high if algo.clip_epsilon_high is not None else algo.clip_epsilon,
        loss_type="dapo",  # unused: AgentTrainer._compute_loss is agentrl's own (algo.loss_aggregation)
        temperature=cfg.rollout.temperature,  # TRL scales logits by it when scoring the sampled tokens
        max_completion_length=cfg.rollout.max_new_tokens,
        entropy_coef=0.0,  # TRL's bonus assumes gradient-accumulation micro-steps
        use_cpu=hw.device == "cpu",
        bf16=hw.precision == "bf16",
        fp16=hw.precision == "fp16",
        gradient_checkpointing=t.gradient_checkpointing,
        # non-reentrant: works with LoRA (no input gradients needed) and DDP (no unused-parameter hooks to confuse);
        # TRL turns on PEFT's input gradients itself, and switches to reentrant for PEFT under ZeRO-3
        gradient_checkpointing_kwargs={"use_reentrant": False},
        ddp_find_unused_parameters=False,  # every parameter takes part in every forward pass
        logging_steps=1,
        save_strategy="steps",
        save_steps=t.save_every,
        save_total_limit=t.keep_last,
        report_to="none",
        disable_tqdm=True,
        seed=cfg.seed,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        **grpo_vllm_kwargs(cfg),
    )


def per_device_rows(cfg: Any) -> int:
    """TRL's per-device batch size. Unused by the HF path (2 keeps TRL's sampler happy); with vLLM, TRL sizes
    the colocated engine's max_num_seqs from it, so it is the episodes per rank (kept even for TRL's sampler)."""
    if cfg.rollout.backend != "vllm":
        return 2
    episodes = cfg.trainer.tasks_per_iteration * cfg.trainer.group_size
    per_rank = -(-episodes // cfg.hardware.num_processes)
    return per_rank + per_rank % 2
