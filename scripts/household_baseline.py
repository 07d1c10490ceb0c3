"""Measure a uniformly random admissible policy on each household level.

Usage: ``python scripts/household_baseline.py [--episodes 2000] [--levels easy default ...]``

For each level it plays one episode on each of the first N tasks of the eval split
("valid") and prints the random policy's success rate (with a 95 % interval), its mean
episode length, the mean length of its winning episodes, and the mean length of the
optimal plan (``solve``, which sees the true state, so it needs no search).

Measured with ``python scripts/household_baseline.py --episodes 4000 --seed 0``
(search_len: an agent that cannot see into closed containers and searches the
receptacles in listed order; search>=10: the share of tasks where that takes 10+ steps):

    level    max_steps  receps  random_success  95%_ci         mean_len  mean_win_len  optimal_len  search_len  search>=10
    easy     8          2       0.210           [0.198,0.223]  7.57      5.98          4.00         4.48        0.00
    default  10         3       0.108           [0.099,0.118]  9.72      7.42          4.27         5.73        0.00
    medium   20         4       0.058           [0.051,0.066]  19.61     13.28         4.28         6.24        0.03
    multistep 15        3       0.039           [0.033,0.045]  14.87     11.61         6.06         7.91        0.14
    search   15         3       0.151           [0.136,0.168]  14.31     10.45         4.55         5.87        0.00   (--episodes 2000)
    long     30         6       0.014           [0.011,0.018]  29.84     18.84         5.82         9.39        0.48
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl.envs.household import LEVELS, HouseholdSuite, decode, random_admissible_policy, solve  # noqa: E402
from agentrl.envs.household_world import OPENABLE, kind  # noqa: E402


def wilson(wins: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion."""
    if n == 0:
        return 0.0, 0.0
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def search_length(task) -> int:
    """Plan length for an agent that cannot see into closed containers.

    It visits the receptacles in the order the room lists them (opening closed ones)
    until it finds the goal object, then follows the optimal plan from there.
    """
    layout, state, goal = decode(task.payload)
    source = state.location(goal.instance)
    hidden = lambda r: kind(r) in OPENABLE and r not in state.opened  # noqa: E731
    found = 0
    for recep in layout.receptacles:
        found += 1 + hidden(recep)
        if recep == source:
            break
    return found + len(solve(task)) - 1 - hidden(source)


def measure(level: str, episodes: int, seed: int, split: str = "valid") -> dict:
    """Play ``episodes`` random episodes on ``level`` and summarise them."""
    suite = HouseholdSuite(level)
    env = suite.make_env()
    rng = random.Random(seed)
    wins, lengths, win_lengths, optimal, search = 0, [], [], [], []
    for i in range(episodes):
        task = suite.task(split, i)
        optimal.append(len(solve(task)))
        search.append(search_length(task))
        obs = env.reset(task)
        steps, done = 0, False
        while not done:
            result = env.step(random_admissible_policy(obs, rng))
            obs, done, steps = result.observation, result.done, steps + 1
        lengths.append(steps)
        if result.won:
            wins += 1
            win_lengths.append(steps)
    env.close()
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return {
        "level": level,
        "max_steps": suite.max_steps,
        "receps": LEVELS[level].receptacles,
        "random_success": wins / episodes,
        "ci": wilson(wins, episodes),
        "mean_len": mean(lengths),
        "mean_win_len": mean(win_lengths),
        "optimal_len": mean(optimal),
        "search_len": mean(search),
        "search_ge_10": sum(n >= 10 for n in search) / episodes,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000, help="episodes per level (one per task)")
    parser.add_argument("--levels", nargs="+", default=list(LEVELS), choices=list(LEVELS))
    parser.add_argument("--seed", type=int, default=0, help="seed of the random policy")
    args = parser.parse_args(argv)
    header = (
        "level",
        "max_steps",
        "receps",
        "random_success",
        "95%_ci",
        "mean_len",
        "mean_win_len",
        "optimal_len",
        "search_len",
        "search>=10",
    )
    rows = []
    for level in args.levels:
        r = measure(level, args.episodes, args.seed)
        rows.append(
            (
                r["level"],
                str(r["max_steps"]),
                str(r["receps"]),
                f"{r['random_success']:.3f}",
                f"[{r['ci'][0]:.3f},{r['ci'][1]:.3f}]",
                f"{r['mean_len']:.2f}",
                f"{r['mean_win_len']:.2f}",
                f"{r['optimal_len']:.2f}",
                f"{r['search_len']:.2f}",
                f"{r['search_ge_10']:.2f}",
            )
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    main()
