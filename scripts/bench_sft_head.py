"""`agentrl sft`'s loss on a CPU: the full logits (the tiny model's warm-up path) against TRL's fused LM head over
the reply's positions only (what `agentrl sft` takes, agentrl/fused_head.py), on a real model and real pairs.

    python scripts/bench_sft_head.py                                   # SmolLM2, household default, bf16
    python scripts/bench_sft_head.py --steps 4 --precision fp32 --overrides env.level=easy

The pairs are `agentrl sft`'s: the expert's episodes mixed with a random admissible policy's (sft.episodes,
sft.random_episodes), through RL's prompt template. For each path it trains a fresh copy of the model for
`--steps` optimizer steps of `sft.batch_size` pairs, the same batches in the same order, and prints the median
seconds of a step after the first, each step's loss, and the speed-up. The model comes from the registry
(`agentrl models fetch smollm2-135m-instruct`).
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per path (the first is not timed)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides of the sft config")
    args = parser.parse_args()

    import tempfile

    from transformers import TrainerCallback

    from agentrl.config.store import compose_config
    from agentrl.envs.registry import make_suite
    from agentrl.models.fine_tune import Schedule, sft_trainer
    from agentrl.models.load import load_policy
    from agentrl.train.sft import expert_demonstrations, random_demonstrations

    overrides = [
        "model=smollm2-135m-instruct",
        "env.level=default",
        "sft.episodes=8",
        "sft.random_episodes=8",
        f"hardware.precision={args.precision}",
        *args.overrides,
    ]
    cfg = compose_config("sft", overrides)
    suite = make_suite(cfg.env, faults=False)
    pairs = expert_demonstrations(suite, cfg)[0] + random_demonstrations(suite, cfg)
    schedule = Schedule(
        steps=args.steps,
        batch_size=cfg.sft.batch_size,
        learning_rate=cfg.sft.learning_rate,
        seed=cfg.seed,
        max_prompt_tokens=cfg.rollout.max_prompt_tokens,
    )
    print(f"{len(pairs)} pairs, {args.steps} steps of {schedule.batch_size} pairs, {args.precision}", flush=True)

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.seconds, self.started = [], 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.started)

    medians = {}
    for full_logits in (True, False):
        model, tokenizer = load_policy(cfg.model, cfg.env, cfg.hardware)
        times = StepTimes()
        with tempfile.TemporaryDirectory() as scratch:
            trainer = sft_trainer(
                model,
                tokenizer,
                pairs,
                schedule,
                scratch,
                precision=args.precision,
                callbacks=[times],
                full_logits=full_logits,
            )
            trainer.train()
        losses = [round(entry["loss"], 5) for entry in trainer.state.log_history if "loss" in entry]
        path = "full logits" if full_logits else "reply's positions only"
        medians[full_logits] = statistics.median(times.seconds[1:] or times.seconds)
        steps = " ".join(f"{s:.1f}" for s in times.seconds)
        print(f"{path:23s}: median step {medians[full_logits]:.2f} s (steps: {steps}); losses {losses}", flush=True)
    print(f"speed-up: {medians[True] / medians[False]:.2f}x")


if __name__ == "__main__":
    main()
