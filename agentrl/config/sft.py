"""The schema of `agentrl sft`: the training config's groups and its own `sft` section (docs/sft.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from annotated_types import Ge, Gt, MinLen

from agentrl.config.run import TrainConfig
from agentrl.config.values import checked


@dataclass
class SftConfig:
    """`agentrl sft`: behaviour cloning from the environment's expert (docs/sft.md). The expert plays `episodes`
    train tasks through RL's prompts; every turn of a won episode is one (prompt, action) pair; TRL's SFTTrainer
    trains on the action tokens only."""

    episodes: int = checked(200, Ge(0))  # expert episodes, one per train task, from task index first_task on
    # episodes of a uniformly random admissible policy on the train tasks after the expert's, every turn one pair
    # (won or not), mixed with the expert's: a start that still spreads over the admissible actions, so that RL's
    # groups differ in reward (docs/sft.md, "A start that explores")
    random_episodes: int = checked(0, Ge(0))
    first_task: int = checked(0, Ge(0))  # the train split's index of the first task the expert plays
    epochs: int = checked(2, Ge(1))  # passes over the expert's pairs (optimizer steps: ceil(pairs / batch_size) each)
    batch_size: int = checked(16, Ge(1))  # pairs per optimizer step
    # constant; a full fine-tune of a 0.1-1B instruct model takes about 1e-5, LoRA (model.lora.enabled) about 1e-4
    learning_rate: float = checked(1e-5, Gt(0))
    weight_decay: float = checked(0.0, Ge(0))
    max_grad_norm: float = checked(1.0, Gt(0))
    eval_before: bool = True  # also evaluate the model before fine-tuning (held-out, the protocol of `agentrl eval`)
    # the model folder to write (new or empty): plain weights and tokenizer, a LoRA adapter merged in;
    # None: <run folder>/model
    output: str | None = checked(None, MinLen(1))


@dataclass
class SftRunConfig(TrainConfig):
    """`agentrl sft`: the training config's groups (env, model, hardware; model=tiny's recipe composes as in
    `agentrl train`) and the `sft` section. It reads env, model, hardware, rollout (the prompt budget and the
    evaluation's reply length), eval (the held-out protocol) and sft; the RL keys (algo, trainer) are not read."""

    sft: SftConfig = field(default_factory=SftConfig)
