"""The gain of RL runs over the start they share, on the same held-out tasks, with bootstrap intervals.

    agentrl eval <sft model> eval.num_tasks=100 hydra.run.dir=evals/start
    agentrl eval <run S>/checkpoints/checkpoint-40 eval.num_tasks=100 hydra.run.dir=evals/seed_S   # each seed
    python scripts/held_out_gain.py evals/start evals/seed_0 evals/seed_1 evals/seed_2

Each folder is an `agentrl eval` output (its trajectories.jsonl: a line an episode, `task_id` and `won`); the ends
must hold the start's tasks. It prints each end's held-out success, its gain over the start and a 95 % interval
from a paired bootstrap over the tasks, then the mean's, whose resamples take the seeds, then the tasks within
each (agentrl/report/study.py, `paired_gains`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def outcomes(folder: Path) -> dict[str, float]:
    """task_id -> 1.0 where the episode was won, from an `agentrl eval` folder; exits with one line if unreadable."""
    path = folder / "trajectories.jsonl"
    try:
        lines = path.read_text().splitlines()
        return {r["task_id"]: float(bool(r["won"])) for r in map(json.loads, filter(str.strip, lines))}
    except (OSError, ValueError, KeyError) as error:
        sys.exit(f"{path}: not an agentrl eval's trajectories ({type(error).__name__}: {error})")


def aligned(start: dict[str, float], end: dict[str, float], folder: Path) -> list[float]:
    """The end's outcomes on the start's tasks, in the order of sorted(start); exits with one line where `folder`
    (the end's) lacks some of them."""
    tasks = sorted(start)
    if missing := [t for t in tasks if t not in end]:
        sys.exit(f"{folder}: {len(missing)} of the start's {len(tasks)} tasks are missing (first: {missing[0]})")
    return [end[t] for t in tasks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("start", type=Path, help="the agentrl eval folder of the start")
    parser.add_argument("ends", type=Path, nargs="+", help="the agentrl eval folder of each seed's end")
    args = parser.parse_args()

    import numpy as np

    from agentrl.report.study import paired_gains

    start = outcomes(args.start)
    tasks = sorted(start)
    ends = [aligned(start, outcomes(folder), folder) for folder in args.ends]
    start_row, end_rows = np.array([start[t] for t in tasks]), np.array(ends)
    per_seed, mean = paired_gains(start_row, end_rows)
    print(f"{len(tasks)} held-out tasks; start {start_row.mean():.3f} ({args.start})")
    print("end | held-out | gain | 95 % interval")
    for folder, row, (gain, low, high) in zip(args.ends, end_rows, per_seed):
        print(f"{folder} | {row.mean():.3f} | {gain:+.3f} | [{low:+.3f}, {high:+.3f}]")
    if len(ends) > 1:
        gain, low, high = mean
        print(f"mean of {len(ends)} | {end_rows.mean():.3f} | {gain:+.3f} | [{low:+.3f}, {high:+.3f}]")


if __name__ == "__main__":
    main()
