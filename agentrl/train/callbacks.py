"""The trainer's per-iteration callback: held-out evaluation on schedule, and one metrics record per iteration."""

from __future__ import annotations

import sys
from typing import Any

from transformers import TrainerCallback

from agentrl.train.distributed import reduce_metrics
from agentrl.train.stopping import EVALUATION

# TRL's log keys -> agentrl's metric names (TRL has already reduced these across ranks)
TRL_METRICS = {
    "loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "learning_rate": "train/learning_rate",
    "entropy": "train/entropy",
    "kl": "train/kl",
    "clip_ratio/region_mean": "train/clip_ratio",
}


def evaluates_at(iteration: int, every: int, last: int) -> bool:
    """Whether `iteration` ends with a held-out evaluation: every `every` (trainer.eval_every; 0: never), and the last."""
    return (every > 0 and iteration % every == 0) or iteration >= last


class IterationCallback(TrainerCallback):
    """Held-out evaluation at iteration 0, every `eval_every` and at the end; one metrics record per iteration."""

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        if self.trainer.cfg.trainer.eval_every > 0 and state.global_step == 0:  # a resumed run has it already
            self.trainer.tracker.log(0, self.trainer.evaluate())

    def on_step_end(self, args, state, control, **kwargs):
        if evaluates_at(state.global_step, self.trainer.cfg.trainer.eval_every, state.max_steps):
            self.trainer.stop.enter(EVALUATION, state.global_step)
            if self.trainer.stop.wanted() and self.trainer.accelerator.is_main_process:
                print(  # a stop waits for it: say so (an evaluation can take minutes)
                    f"stopping: the held-out evaluation of iteration {state.global_step} runs first "
                    f"({self.trainer.evaluation_episodes()} episodes), then the checkpoint is written",
                    file=sys.stderr,
                    flush=True,
                )
            self.trainer.last_eval = self.trainer.evaluate()
            self.trainer.iteration_metrics.update(self.trainer.last_eval)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:
            return  # the end-of-training summary, not an iteration
        record = {new: logs[old] for old, new in TRL_METRICS.items() if old in logs}
        record.update(reduce_metrics(self.trainer.all_ranks([self.trainer.iteration_metrics])))
        rollout_s, update_s = record.get("time/rollout_s", 0.0), record.get("time/update_s", 0.0)
        record["time/iteration_s"] = rollout_s + update_s
        self.trainer.tracker.log(state.global_step, record)
        self.trainer.iteration_metrics = {}
