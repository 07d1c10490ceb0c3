"""Baselines on env=alfworld, per task type: a random admissible policy, and the planner (an oracle).

The planner replays the plan that TextWorld's PDDL planner gives for each game through agentrl's own
adapter; it should win nearly every game, which checks the environment itself. The random policy is
the floor that any trained agent must beat.

Without the ALFWorld download, this runs on the generated pool (synthetic scenes, not the ALFRED
floor plans).

    python scripts/alfworld_baselines.py --per-type 10 --split eval_in_distribution
    ALFWORLD_DATA=~/alfworld python scripts/alfworld_baselines.py --split eval_out_of_distribution
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

from agentrl.config.envs import AlfworldEnvConfig
from agentrl.envs.alfworld.engine import planner_walkthrough
from agentrl.envs.registry import make_suite
from agentrl.envs.workers import make_pool
from agentrl.rollout.batch import summarize
from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.policies import RandomPolicy


def planner_success(suite, tasks) -> dict[str, list[bool]]:
    by_type: dict[str, list[bool]] = defaultdict(list)
    for task in tasks:
        env = suite.make_env()
        env.reset(task)
        won = False
        for command in planner_walkthrough(task.payload["gamefile"]):
            step = env.step(command)
            won = step.won
            if step.done:
                break
        env.close()
        by_type[task.task_type].append(won)
    return by_type


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-type", type=int, default=10, help="generated games per task type (no download)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="eval_in_distribution")
    parser.add_argument("--episodes", type=int, default=3, help="random-policy episodes per game")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    cfg = AlfworldEnvConfig(generated_per_type=args.per_type, generation_seed=args.seed)
    suite = make_suite(cfg)
    tasks = [suite.task(args.split, i) for i in range(suite.split_size(args.split))]
    print(f"{len(tasks)} games of {args.split} from {suite.root} ({'synthetic' if suite.synthetic else 'download'})")

    started = time.time()
    with make_pool(suite.make_env, args.workers, 120.0) as pool:
        batch = collect(suite, tasks, args.episodes, RandomPolicy(args.seed), PromptSpec("alfworld", 2), pool=pool)
    random_metrics = summarize(batch, prefix="random")
    random_s = time.time() - started
    started = time.time()
    planner = planner_success(suite, tasks)
    planner_s = time.time() - started

    print(f"\n{'task type':<10} {'games':>5} {'random':>7} {'planner':>8}")
    for task_type in sorted(planner):
        print(
            f"{task_type:<10} {len(planner[task_type]):>5} {random_metrics.get(f'random/{task_type}/success', 0):>7.3f} "
            f"{sum(planner[task_type]) / len(planner[task_type]):>8.3f}"
        )
    all_planner = [w for v in planner.values() for w in v]
    print(
        f"{'all':<10} {len(all_planner):>5} {random_metrics['random/success']:>7.3f} "
        f"{sum(all_planner) / len(all_planner):>8.3f}"
    )
    print(
        f"\nrandom: {args.episodes} episodes per game, {random_metrics['random/episode_length']:.1f} steps on average, "
        f"{random_s:.0f} s with {args.workers} workers; planner: {planner_s:.0f} s"
    )
    print(json.dumps({"random": random_metrics, "planner": {k: sum(v) / len(v) for k, v in planner.items()}}))


if __name__ == "__main__":
    main()
