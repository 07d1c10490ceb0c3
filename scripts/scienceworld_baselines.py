"""Baselines on env=scienceworld, per task type: a random valid-action policy, and the engine's gold path.

The random policy draws uniformly from the valid action-object combinations at every step (agentrl's
``RandomPolicy`` on ``admissible_actions``). The gold path is the action sequence that the engine itself
generates for a task (``load(..., generateGoldPath=True)``); it is replayed through agentrl's adapter without a step limit, which
checks the environment itself (success, reward, episode end), and counted as won within the episode limit
(``env.max_steps``, 30 as in EPO) when it wins in that many steps. Both run on the first ``--per-type`` variations of each task type of a split.

    python scripts/scienceworld_baselines.py --per-type 3 --split eval_in_distribution
    python scripts/scienceworld_baselines.py --per-type 5 --split eval_out_of_distribution --episodes 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from agentrl.config.envs import ScienceworldEnvConfig
from agentrl.envs.registry import make_suite  # noqa: E402
from agentrl.envs.workers import make_pool  # noqa: E402
from agentrl.rollout.batch import summarize  # noqa: E402
from agentrl.rollout.collector import PromptSpec, collect  # noqa: E402
from agentrl.rollout.policies import RandomPolicy  # noqa: E402


def gold_runs(suite, tasks) -> dict[str, list[tuple[bool, int, int]]]:
    """Per task type: (won, steps played, gold path length) of replaying the engine's gold path with no step
    limit; it is won within ``max_steps`` when it is won in that many steps or fewer."""
    by_type: dict[str, list[tuple[bool, int, int]]] = defaultdict(list)
    env = suite.make_env()
    try:
        for task in tasks:
            gold = env.gold_path(task)
            env.max_steps = len(gold) + 1
            env.reset(task)
            won, steps = False, 0
            for action in gold:
                step = env.step(action)
                steps += 1
                won = step.won
                if step.done:
                    break
            by_type[task.task_type].append((won, steps, len(gold)))
    finally:
        env.close()
    return by_type


def merged_summary(batches) -> dict[str, float]:
    """summarize() over the episodes of several collect() batches."""
    merged = batches[0]
    for batch in batches[1:]:
        merged.episodes.extend(batch.episodes)
    return summarize(merged, prefix="random")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-type", type=int, default=3, help="variations per task type")
    parser.add_argument("--split", default="eval_in_distribution")
    parser.add_argument("--episodes", type=int, default=2, help="random-policy episodes per variation")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=8, help="tasks played at once (episodes x chunk JVMs)")
    args = parser.parse_args()

    cfg = ScienceworldEnvConfig(anchor="observation")  # no object-tree hash: not needed here
    suite = make_suite(cfg)
    types = len(suite.task_types)
    tasks = [suite.task(args.split, i) for i in range(min(args.per_type * types, suite.split_size(args.split)))]
    print(f"{len(tasks)} variations of {args.split}: {args.per_type} per task type, {types} task types")

    started = time.time()
    # Every episode slot holds a JVM (~210 MB): play `--chunk` tasks at a time, on the same slots.
    policy, batches = RandomPolicy(args.seed), []
    with make_pool(suite.make_env, args.workers, 120.0) as pool:
        for first in range(0, len(tasks), args.chunk):
            chunk = tasks[first : first + args.chunk]
            batches.append(
                collect(
                    suite, chunk, args.episodes, policy, PromptSpec("compact", 0), max_steps=suite.max_steps, pool=pool
                )
            )
    random_metrics = merged_summary(batches)
    random_s = time.time() - started
    started = time.time()
    gold_free = gold_runs(suite, tasks)
    gold_limited = {
        k: [(won and steps <= suite.max_steps, steps, n) for won, steps, n in v] for k, v in gold_free.items()
    }
    gold_s = time.time() - started

    def rate(runs):
        return sum(won for won, _, _ in runs) / len(runs)

    print(
        f"\n{'task type':<50} {'vars':>4} {'random':>7} {'gold@' + str(suite.max_steps):>8} {'gold':>6} {'gold len':>8}"
    )
    for task_type in suite.task_types:
        if task_type not in gold_free:
            continue
        lengths = [n for _, _, n in gold_free[task_type]]
        print(
            f"{task_type:<50} {len(lengths):>4} {random_metrics.get(f'random/{task_type}/success', 0):>7.3f} "
            f"{rate(gold_limited[task_type]):>8.3f} {rate(gold_free[task_type]):>6.3f} "
            f"{sum(lengths) / len(lengths):>8.1f}"
        )
    everything = [r for v in gold_free.values() for r in v]
    limited = [r for v in gold_limited.values() for r in v]
    print(
        f"{'all':<50} {len(everything):>4} {random_metrics['random/success']:>7.3f} {rate(limited):>8.3f} "
        f"{rate(everything):>6.3f} {sum(n for _, _, n in everything) / len(everything):>8.1f}"
    )
    print(
        f"\nrandom: {args.episodes} episodes per variation, {random_metrics['random/episode_length']:.1f} steps on "
        f"average, {random_s:.0f} s with {args.workers} workers; gold paths: {gold_s:.0f} s"
    )
    print(
        json.dumps(
            {
                "random": random_metrics,
                "gold_within_max_steps": {k: rate(v) for k, v in gold_limited.items()},
                "gold": {k: rate(v) for k, v in gold_free.items()},
                "gold_length": {k: sum(n for _, _, n in v) / len(v) for k, v in gold_free.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
