"""Environment steps that take time (``env.step_latency_s``), for measuring what waits on the environment.

Agent environments answer in tens of milliseconds to seconds (a tool call, a web page, a simulator step); agentrl's
own household answers in microseconds. ``SlowSuite`` makes each step of its environments sleep first, as
``env.fault_rate`` makes them fail: a test and benchmark key (scripts/measure_async.py), not a model of any engine.
A sleep holds no core, as an engine in another process or machine would not.

A spread (``SlowSuite(..., spread=S)``, scripts/measure_turns.py; no config key) makes some steps slower than
others: one in ``slow_every`` sleeps ``latency_s * (1 + S)``, the others ``latency_s``. ``per="step"`` draws each
step; ``per="episode"`` draws once at each reset, for all of the episode's steps. The draws come from the
environment's own ``random.Random``, seeded as ``env.fault_rate``'s are (agentrl/envs/faults.py: the suite's seed,
the process name and how many environments the process has built), never from the training RNG.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from typing import Any

from agentrl.envs.base import AgentEnv, Observation, Step, Task, TaskSuite
from agentrl.envs.faults import WrappedSuite

SPREAD_PER = ("step", "episode")


class SlowEnv:
    """An ``AgentEnv`` whose every step waits ``latency_s`` seconds before the inner environment's (see the module
    docstring for ``spread``)."""

    def __init__(
        self,
        inner: AgentEnv,
        latency_s: float,
        spread: float = 0.0,
        slow_every: int = 8,
        per: str = "step",
        seed: Any = 0,
    ):
        if per not in SPREAD_PER:
            raise ValueError(f"per must be one of {SPREAD_PER}, got {per!r}")
        if spread < 0 or slow_every < 1:
            raise ValueError(f"spread must be >= 0 and slow_every >= 1, got {spread} and {slow_every}")
        self.inner, self.latency_s = inner, latency_s
        self.spread, self.slow_every, self.per = spread, slow_every, per
        self._rng = random.Random(seed)
        self._slow_episode = False

    def reset(self, task: Task) -> Observation:
        if self.spread and self.per == "episode":
            self._slow_episode = self._rng.randrange(self.slow_every) == 0
        return self.inner.reset(task)

    def step(self, action: str) -> Step:
        time.sleep(self.step_latency())
        return self.inner.step(action)

    def step_latency(self) -> float:
        """The seconds the next step waits (a draw, for ``per="step"``)."""
        if not self.spread:
            return self.latency_s
        slow = self._slow_episode if self.per == "episode" else self._rng.randrange(self.slow_every) == 0
        return self.latency_s * (1 + self.spread) if slow else self.latency_s

    def close(self) -> None:
        self.inner.close()


class SlowSuite(WrappedSuite):
    """A suite whose environments are ``SlowEnv``s; tasks and everything else come from ``inner``."""

    def __init__(
        self,
        inner: TaskSuite,
        latency_s: float,
        spread: float = 0.0,
        slow_every: int = 8,
        per: str = "step",
        seed: int = 0,
    ):
        super().__init__(inner)
        self.latency_s = latency_s
        self.spread, self.slow_every, self.per, self.seed = spread, slow_every, per, seed
        self._built = 0  # environments this process has built (each process has its own copy of the suite)

    def make_env(self) -> SlowEnv:
        self._built += 1
        seed = f"{self.seed}-{multiprocessing.current_process().name}-{self._built}"
        return SlowEnv(self.inner.make_env(), self.latency_s, self.spread, self.slow_every, self.per, seed)
