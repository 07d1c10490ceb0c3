"""env.step_latency_s: environments whose steps take time, for the asynchronous-rollout benchmark."""

from __future__ import annotations

import pickle
import time

from agentrl.config.envs import HouseholdEnvConfig
from agentrl.envs.latency import SlowSuite
from agentrl.envs.registry import make_suite


def test_each_step_waits_and_then_answers_as_the_inner_environment():
    slow = make_suite(HouseholdEnvConfig(step_latency_s=0.05))
    plain = make_suite(HouseholdEnvConfig())
    assert isinstance(slow, SlowSuite) and not isinstance(plain, SlowSuite)
    task = plain.task("train", 3)
    env, reference = slow.make_env(), plain.make_env()
    assert env.reset(task) == reference.reset(task)
    action = reference.reset(task).admissible_actions[0]
    env.reset(task)
    started = time.perf_counter()
    step = env.step(action)
    assert time.perf_counter() - started >= 0.05
    assert step == reference.step(action)


def test_builds_and_demonstrations_get_no_latency():
    assert not isinstance(make_suite(HouseholdEnvConfig(step_latency_s=0.05), faults=False), SlowSuite)


def test_a_slow_suite_travels_to_worker_processes():
    suite = pickle.loads(pickle.dumps(make_suite(HouseholdEnvConfig(step_latency_s=0.01))))
    assert suite.latency_s == 0.01 and suite.task("train", 0) == make_suite(HouseholdEnvConfig()).task("train", 0)
