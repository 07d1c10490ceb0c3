"""Fault injection (``env.fault_rate``) and the stop on a broken environment (``env.max_fault_share``).

``FaultyEnv`` makes a chosen share of episodes raise ``InjectedFault``, at their
reset or at one of their steps, so that tests can show a run that survives
faults. The rate is per *episode*, not per call: per call, a 5 % rate would
break 1 - 0.95**11 = 43 % of the 10-step household episodes and 92 % of the
50-step ALFWorld ones, which is the environment being broken, not a run that
must finish. Per episode, ``env.fault_rate`` and ``env.max_fault_share`` are in
the same unit (a share of episodes).

Each ``FaultyEnv`` draws from its own ``random.Random``, seeded from the suite's
seed, the process name (inline, or ``agentrl-env-worker-<k>``) and how many
environments that process has built: runs are reproducible, worker processes
do not repeat each other's faults, and the training RNG is never touched.
"""

from __future__ import annotations

import multiprocessing
import random
from typing import Any

from agentrl.envs.base import AgentEnv, Observation, Step, Task, TaskSuite
from agentrl.errors import UserError


class InjectedFault(RuntimeError):
    """The fault that ``env.fault_rate`` injects."""


class FaultyEnv:
    """An ``AgentEnv`` whose episodes each raise once with probability ``rate``.

    A doomed episode raises at one call drawn uniformly from its reset and its
    first ``horizon`` steps (an episode that ends before then plays normally).
    """

    def __init__(self, inner: AgentEnv, rate: float, seed: Any, horizon: int = 0):
        if not 0 <= rate < 1:
            raise ValueError(f"rate must be in [0, 1), got {rate}")
        self.inner, self.rate, self.horizon = inner, rate, horizon
        self._rng = random.Random(seed)  # str and int seeds give the same stream in every process
        self._calls = 0  # calls of this episode so far; the reset is call 0
        self._fault_at: int | None = None  # the call that raises, or None for a healthy episode

    def reset(self, task: Task) -> Observation:
        self._calls = 0
        doomed = self._rng.random() < self.rate
        self._fault_at = self._rng.randrange(self.horizon + 1) if doomed else None
        self._maybe_fail("reset")
        return self.inner.reset(task)

    def step(self, action: str) -> Step:
        self._calls += 1
        self._maybe_fail("step")
        return self.inner.step(action)

    def _maybe_fail(self, op: str) -> None:
        if self._calls == self._fault_at:
            raise InjectedFault(f"injected fault in {op} (env.fault_rate={self.rate:g})")

    def close(self) -> None:
        self.inner.close()


class WrappedSuite:
    """A suite whose tasks and everything but `make_env` come from ``inner`` (the test keys' wrappers:
    ``FaultySuite`` here, ``envs/latency.py``'s ``SlowSuite``).

    Picklable (a ``ProcessPool`` sends ``suite.make_env`` to its workers) as long as ``inner`` is.
    """

    def __init__(self, inner: TaskSuite):
        self.inner = inner
        self.name, self.splits, self.eval_split = inner.name, inner.splits, inner.eval_split
        self.task_types, self.max_steps = inner.task_types, inner.max_steps

    def task(self, split: str, index: int) -> Task:
        return self.inner.task(split, index)

    def split_size(self, split: str) -> int | None:
        return self.inner.split_size(split)

    def make_env(self) -> AgentEnv:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        """An adapter's own attributes (alfworld's ``synthetic``). Not for dunders or ``inner``
        itself, which unpickling looks up before ``__dict__`` is filled."""
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class FaultySuite(WrappedSuite):
    """A suite whose environments are ``FaultyEnv``s; tasks and everything else come from ``inner``."""

    def __init__(self, inner: TaskSuite, rate: float, seed: int = 0):
        super().__init__(inner)
        self.rate, self.seed = rate, seed
        self._built = 0  # per process: each worker unpickles its own copy

    def make_env(self) -> FaultyEnv:
        self._built += 1
        seed = f"{self.seed}/{multiprocessing.current_process().name}/{self._built}"
        return FaultyEnv(self.inner.make_env(), self.rate, seed, horizon=self.max_steps)


def check_fault_share(faulted: int, episodes: int, limit: float, where: str) -> None:
    """Stop the run when more than ``limit`` of the episodes in ``where`` ("iteration 7") faulted.

    Past that share the iteration trains on next to nothing, and the next ones would too.
    """
    if episodes <= 0 or faulted / episodes <= limit:
        return
    raise UserError(
        f"{100 * faulted / episodes:.0f} % of the episodes in {where} ({faulted} of {episodes}) hit "
        f"environment faults (limit env.max_fault_share={limit:g}); the environment is broken: "
        "see the warnings above"
    )
