"""Reset cost and step throughput of an environment through InlinePool and ProcessPool.

    python scripts/bench_env_workers.py
    python scripts/bench_env_workers.py --env household --slots 64 --steps 50 --workers 0 1 2 4
    python scripts/bench_env_workers.py --step-ms 40 --reset-ms 500   # an engine as slow as ALFWorld
    python scripts/bench_env_workers.py --env scienceworld --slots 8 --steps 30   # one JVM per slot

For each worker count: the pool's start (processes up, first reset of every slot:
engines are built then), the mean cost of resetting all slots again, and lockstep
steps with a random admissible policy (a seeded RNG; a finished episode is reset
with the next task outside the step timing). Household steps take microseconds, so
its figures show the pool's own overhead; ``--step-ms`` / ``--reset-ms`` add work
per call to stand in for a slow engine and show the parallel gain: CPU time
(``--work cpu``, bounded by the free cores) or idle waiting (``--work wait``).

An environment is a name in ``ENVS``: a function of the parsed arguments giving a
picklable ``make_env`` and a ``task(index)`` function.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl.envs.base import Observation, Step, Task  # noqa: E402
from agentrl.envs.workers import EnvFault, make_pool  # noqa: E402


def _spin(ms: float) -> None:
    """Burn ``ms`` milliseconds of this process's CPU time (an engine computing, not waiting)."""
    end = time.process_time() + ms / 1000
    while time.process_time() < end:
        pass


def _wait(ms: float) -> None:
    time.sleep(ms / 1000)


WORK = {"cpu": _spin, "wait": _wait}


class SlowEnv:
    """An env with extra work per reset and step: CPU time (``cpu``) or idle waiting (``wait``)."""

    def __init__(self, inner, reset_ms: float, step_ms: float, work: str = "cpu"):
        self.inner, self.reset_ms, self.step_ms, self.work = inner, reset_ms, step_ms, WORK[work]

    def reset(self, task: Task) -> Observation:
        self.work(self.reset_ms)
        return self.inner.reset(task)

    def step(self, action: str) -> Step:
        self.work(self.step_ms)
        return self.inner.step(action)

    def close(self) -> None:
        self.inner.close()


def slowed(make_env: Callable, reset_ms: float, step_ms: float, work: str = "cpu"):
    return SlowEnv(make_env(), reset_ms, step_ms, work)


def household(args) -> tuple[Callable, Callable[[int], Task]]:
    from agentrl.envs.household import HouseholdSuite

    suite = HouseholdSuite(args.level, max_steps=args.max_steps)
    return suite.make_env, functools.partial(suite.task, "train")


def alfworld(args) -> tuple[Callable, Callable[[int], Task]]:
    """The real ALFWorld engine on the generated pool (or the download, when $ALFWORLD_DATA holds it)."""
    from agentrl.config.envs import AlfworldEnvConfig
    from agentrl.envs.registry import make_suite

    suite = make_suite(AlfworldEnvConfig(max_steps=args.max_steps or 50))
    return suite.make_env, functools.partial(suite.task, "train")


def scienceworld(args) -> tuple[Callable, Callable[[int], Task]]:
    """ScienceWorld's simulator, one JVM per slot (the extra and a Java runtime)."""
    from agentrl.config.envs import ScienceworldEnvConfig
    from agentrl.envs.registry import make_suite

    suite = make_suite(ScienceworldEnvConfig(max_steps=args.max_steps or 30))
    return suite.make_env, functools.partial(suite.task, "train")


ENVS: dict[str, Callable] = {"household": household, "alfworld": alfworld, "scienceworld": scienceworld}


def run(make_env: Callable, task: Callable[[int], Task], workers: int, args) -> dict[str, float]:
    rng = random.Random(args.seed)
    next_task = args.slots
    slots = list(range(args.slots))
    t0 = time.perf_counter()
    pool = make_pool(make_env, workers, args.timeout)
    try:
        current = dict(zip(slots, pool.reset([(s, task(s)) for s in slots])))
        start = time.perf_counter() - t0
        resets = []
        for r in range(args.resets):
            t = time.perf_counter()
            current = dict(zip(slots, pool.reset([(s, task(s + r)) for s in slots])))
            resets.append(time.perf_counter() - t)
        stepping, n_steps = 0.0, 0
        for _ in range(args.steps):
            obs = {s: r.observation if isinstance(r, Step) else r for s, r in current.items()}
            items = [(s, rng.choice(obs[s].admissible_actions)) for s in slots]
            t = time.perf_counter()
            results = pool.step(items)
            stepping += time.perf_counter() - t
            n_steps += len(items)
            current = dict(zip(slots, results))
            over = [s for s, r in current.items() if isinstance(r, EnvFault) or r.done]
            if over:
                fresh = pool.reset([(s, task(next_task + k)) for k, s in enumerate(over)])
                next_task += len(over)
                current.update(zip(over, fresh))
        faults = pool.faults
    finally:
        pool.close()
    reset_s = sum(resets) / max(len(resets), 1)
    return {
        "start_s": start,
        "reset_all_ms": reset_s * 1000,
        "reset_each_ms": reset_s * 1000 / args.slots,
        "steps_per_s": n_steps / stepping if stepping else float("nan"),
        "step_call_ms": stepping * 1000 / max(args.steps, 1),
        "faults": faults,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(ENVS), default="household")
    parser.add_argument("--level", default="default", help="household level")
    parser.add_argument("--max-steps", type=int, default=None, help="episode length cap (default: the level's)")
    parser.add_argument("--slots", type=int, default=64, help="episodes stepped in lockstep")
    parser.add_argument("--steps", type=int, default=50, help="lockstep step calls to time")
    parser.add_argument("--resets", type=int, default=3, help="timed resets of all slots")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4], help="0: in-process")
    parser.add_argument("--step-ms", type=float, default=0.0, help="extra CPU work per step (simulated engine)")
    parser.add_argument("--reset-ms", type=float, default=0.0, help="extra CPU work per reset (simulated engine)")
    parser.add_argument(
        "--work",
        choices=sorted(WORK),
        default="cpu",
        help="what the extra time is: CPU work (bounded by cores) or waiting",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="ProcessPool timeout_s")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    make_env, task = ENVS[args.env](args)
    if args.step_ms or args.reset_ms:
        make_env = functools.partial(slowed, make_env, args.reset_ms, args.step_ms, args.work)
    extra = (
        f", +{args.reset_ms:g} ms/reset, +{args.step_ms:g} ms/step of {args.work}"
        if args.step_ms or args.reset_ms
        else ""
    )
    print(
        f"env={args.env} slots={args.slots} steps={args.steps}{extra}; {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}"
    )
    header = (
        f"{'workers':>7} {'start s':>8} {'reset all ms':>13} {'per reset ms':>13} {'step call ms':>13} "
        f"{'steps/s':>10} {'faults':>6}"
    )
    print(header)
    print("-" * len(header))
    for workers in args.workers:
        m = run(make_env, task, workers, args)
        print(
            f"{workers:>7} {m['start_s']:>8.2f} {m['reset_all_ms']:>13.2f} {m['reset_each_ms']:>13.3f} "
            f"{m['step_call_ms']:>13.2f} {m['steps_per_s']:>10.0f} {m['faults']:>6}",
            flush=True,
        )


if __name__ == "__main__":
    main()
