"""Environment steps that take time (``env.step_latency_s``), for measuring what waits on the environment.

Agent environments answer in tens of milliseconds to seconds (a tool call, a web page, a simulator step); agentrl's
own household answers in microseconds. ``SlowSuite`` makes each step of its environments sleep first, as
``env.fault_rate`` makes them fail: a test and benchmark key (scripts/measure_async.py), not a model of any engine.
A sleep holds no core, as an engine in another process or machine would not.
"""

from __future__ import annotations

import time

from agentrl.envs.base import AgentEnv, Observation, Step, Task, TaskSuite
from agentrl.envs.faults import WrappedSuite


class SlowEnv:
    """An ``AgentEnv`` whose every step waits ``latency_s`` seconds before the inner environment's."""

    def __init__(self, inner: AgentEnv, latency_s: float):
        self.inner, self.latency_s = inner, latency_s

    def reset(self, task: Task) -> Observation:
        return self.inner.reset(task)

    def step(self, action: str) -> Step:
        time.sleep(self.latency_s)
        return self.inner.step(action)

    def close(self) -> None:
        self.inner.close()


class SlowSuite(WrappedSuite):
    """A suite whose environments are ``SlowEnv``s; tasks and everything else come from ``inner``."""

    def __init__(self, inner: TaskSuite, latency_s: float):
        super().__init__(inner)
        self.latency_s = latency_s

    def make_env(self) -> SlowEnv:
        return SlowEnv(self.inner.make_env(), self.latency_s)
