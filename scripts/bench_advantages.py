"""Throughput of the vectorised advantage estimators (GRPO, GiGPO, RLOO).

    python scripts/bench_advantages.py
    python scripts/bench_advantages.py --sizes 1000 26000 1000000 --repeats 5 --similarity-max-rows 26000

Rows come in groups of 8 episodes of about 10 steps (5 to 15), in shuffled order,
with sparse success rewards and 10 % invalid actions. GiGPO's anchors are strings
"state-<group>-<k>": every episode of a group starts in state 0 and then moves
among 6 states, so step groups repeat within a group (as states do in ALFWorld)
and never across groups. Each timed GiGPO call gets freshly built anchor strings,
because Python caches a string's hash and a trainer's observations are new each
iteration. GiGPO with similarity grouping (difflib, a Python loop) runs only up
to --similarity-max-rows.

The reference (verl-agent) loops in Python and takes about 8.5 s for 26k rows
(docs/algorithms.md); the target here is well under 50 ms for 26k rows and a few
seconds for 1M.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from agentrl.algos.gigpo import gigpo
from agentrl.algos.grpo import grpo, rloo

STATES_PER_GROUP = 6


def make_rows(n_rows: int, rng: np.random.Generator, episodes_per_group: int = 8):
    lengths = rng.integers(5, 16, size=n_rows // 5 + 1)
    lengths = lengths[: np.searchsorted(np.cumsum(lengths), n_rows) + 1]
    lengths[-1] -= lengths.sum() - n_rows  # exactly n_rows
    episode = np.repeat(np.arange(lengths.size), lengths)
    group = episode // episodes_per_group
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    step = np.arange(n_rows) - starts
    success = rng.random(lengths.size) < 0.3
    last = step == lengths[episode] - 1
    reward = np.where(last & success[episode], 10.0, 0.0)
    valid = rng.random(n_rows) > 0.1
    state = np.where(step == 0, 0, rng.integers(1, STATES_PER_GROUP + 1, size=n_rows))
    perm = rng.permutation(n_rows)
    return (group[perm], episode[perm], step[perm], reward[perm], valid[perm]), state[perm]


def make_anchors(group: np.ndarray, state: np.ndarray) -> list[str]:
    return [f"state-{g}-{k}" for g, k in zip(group.tolist(), state.tolist())]


def best_seconds(call: Callable[[], object], setup: Callable[[], object], repeats: int) -> float:
    """Best wall time of ``call(setup())`` over ``repeats`` runs, after one warm-up; setup is not timed."""
    call(setup())
    times = []
    for _ in range(repeats):
        arg = setup()
        t0 = time.perf_counter()
        call(arg)
        times.append(time.perf_counter() - t0)
    return min(times)


def estimators(cols, state, similarity: bool):
    """(name, mode, call, setup) for every estimator to time on these rows."""
    group = cols[0]

    def fresh_anchors():
        return make_anchors(group, state)

    def no_setup():
        return None

    yield "grpo", "rows/std", lambda _: grpo(*cols), no_setup
    yield "grpo", "episodes/none", lambda _: grpo(*cols, norm="none", episode_stats="episodes"), no_setup
    yield "gigpo", "rows/std", lambda anchors: gigpo(*cols, anchors), fresh_anchors
    yield "gigpo", "rows/none", lambda anchors: gigpo(*cols, anchors, norm="none"), fresh_anchors
    if similarity:
        yield "gigpo", "rows/std sim 0.95", lambda anchors: gigpo(*cols, anchors, similarity=0.95), fresh_anchors
    yield "rloo", "-", lambda _: rloo(*cols), no_setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 26_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per size; the best is reported")
    parser.add_argument("--similarity-max-rows", type=int, default=26_000, help="largest size for similarity grouping")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    print(f"{'rows':>10} {'estimator':>9} {'mode':>18} {'best ms':>10} {'rows/s':>14}")
    for n in args.sizes:
        cols, state = make_rows(n, rng)
        for name, mode, call, setup in estimators(cols, state, similarity=n <= args.similarity_max_rows):
            best = best_seconds(call, setup, args.repeats)
            print(f"{n:>10} {name:>9} {mode:>18} {best * 1e3:>10.2f} {n / best:>14,.0f}", flush=True)


if __name__ == "__main__":
    main()
