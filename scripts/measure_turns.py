"""Seconds per rollout in lockstep and with turns without lockstep (rollout.turns=ready), where some steps are slow.

    python scripts/measure_turns.py
    python scripts/measure_turns.py --latency 0.01 --spread 20 --per step --rollouts 3
    python scripts/measure_turns.py --per episode          # one episode in 8 slow for all its steps

The embedded tiny model (eager attention, which `ready` needs; both modes use it) plays `--tasks` x `--group`
household episodes of `--max-steps` turns, with the environments in `--workers` worker processes. Each environment
step sleeps `--latency` s, and one in 8 sleeps `--latency * (1 + --spread)` (agentrl/envs/latency.py, `SlowSuite`):
each step drawn apart (`--per step`) or once per episode (`--per episode`). The modes take turns, one rollout each,
`--rollouts` times after a first round that is not timed (workers' imports, first builds). For each mode it prints
the seconds of each rollout, their median, the rows, and
whether every rollout of the mode (each from torch seed 0) gave the same rows, whatever the timing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.01, help="seconds every step sleeps")
    parser.add_argument("--spread", type=float, default=20.0, help="a slow step sleeps latency * (1 + spread)")
    parser.add_argument("--per", choices=("step", "episode"), default="step", help="what is drawn slow, 1 in 8")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--workers", type=int, default=8, help="env.num_workers")
    parser.add_argument("--rollouts", type=int, default=3, help="timed rollouts per mode")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--modes", nargs="+", default=["lockstep", "ready"])
    args = parser.parse_args()

    from agentrl.cpu import batch_invariant_blas

    if "ready" in args.modes and (varies := batch_invariant_blas()) is not None:  # before the model multiplies
        sys.exit(f"rollout.turns=ready needs rows that do not depend on their batch, and {varies}")

    import torch

    from agentrl.config.store import compose_config
    from agentrl.envs.latency import SlowSuite
    from agentrl.envs.registry import make_suite
    from agentrl.envs.workers import ProcessPool
    from agentrl.models.load import load_policy
    from agentrl.rollout.collector import PromptSpec, collect
    from agentrl.rollout.policies import HFPolicy, SamplingSpec

    cfg = compose_config("train", ["model.attn_implementation=eager"])
    model, tokenizer = load_policy(cfg.model, cfg.env, cfg.hardware)
    model.eval()
    suite = SlowSuite(make_suite(cfg.env, faults=False), args.latency, spread=args.spread, per=args.per, seed=0)
    tasks = [suite.task("train", i) for i in range(args.tasks)]
    prompt = PromptSpec(cfg.env.prompt_template, cfg.env.history_length)
    sampling = SamplingSpec(temperature=1.0, max_new_tokens=args.max_new_tokens)
    print(
        f"{args.tasks} x {args.group} episodes, {args.max_steps} turns, {args.workers} workers, steps of "
        f"{args.latency:g} s, 1 in 8 {args.latency * (1 + args.spread):g} s (per {args.per}), "
        f"torch threads {torch.get_num_threads()}",
        flush=True,
    )
    seconds = {mode: [] for mode in args.modes}
    batches = {mode: [] for mode in args.modes}
    with ProcessPool(suite.make_env, args.workers) as pool:
        for k in range(args.rollouts + 1):  # the modes in turn, so that both see the same load
            for mode in args.modes:
                torch.manual_seed(0)  # every rollout of a mode the same seed: the same rows, whatever the timing
                policy = HFPolicy(model, tokenizer, sampling)
                started = time.perf_counter()
                batch = collect(
                    suite, tasks, args.group, policy, prompt, max_steps=args.max_steps, pool=pool, turns=mode
                )
                if k:
                    seconds[mode].append(time.perf_counter() - started)
                    batches[mode].append(batch)
    results = {}
    for mode in args.modes:
        first = (batches[mode][0].completion_ids, batches[mode][0].logprobs)
        same = all((b.completion_ids, b.logprobs) == first for b in batches[mode])
        results[mode] = statistics.median(seconds[mode])
        each = ", ".join(f"{s:.2f}" for s in seconds[mode])
        print(
            f"{mode:>8}: {results[mode]:.2f} s per rollout (median of {each}), {len(batches[mode][0])} rows, "
            f"the same rows in every rollout: {same}",
            flush=True,
        )
    if {"lockstep", "ready"} <= results.keys():
        print(f"ready / lockstep: {results['ready'] / results['lockstep']:.2f}")


if __name__ == "__main__":
    main()
