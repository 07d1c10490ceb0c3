"""Fault injection (env.fault_rate), runs that survive it, and the stop on a broken environment."""

from __future__ import annotations

import json
import pickle

import pytest

from agentrl.cli.launch import preflight
from agentrl.config.envs import HouseholdEnvConfig
from agentrl.config.store import register_configs
from agentrl.envs.base import Observation, Step, Task
from agentrl.envs.faults import FaultyEnv, FaultySuite, InjectedFault, check_fault_share
from agentrl.envs.household import HouseholdEnv, HouseholdSuite
from agentrl.envs.registry import make_suite
from agentrl.envs.workers import REPLACED, EnvFault, InlinePool, ProcessPool
from agentrl.errors import UserError
from agentrl.rollout.batch import summarize
from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.policies import RandomPolicy


class EndlessEnv:
    """Never ends, never fails: every fault comes from the wrapper."""

    closed = False

    def reset(self, task: Task) -> Observation:
        return Observation("obs", ["look"], "task")

    def step(self, action: str) -> Step:
        return Step(Observation("obs", ["look"], "task"), 0.0, False, False, True)

    def close(self) -> None:
        self.closed = True


ANY_TASK = Task("t", "x")


def play(env: FaultyEnv, episodes: int, steps: int, task: Task = ANY_TASK) -> list[tuple[int, int] | None]:
    """Per episode: None, or (episode, call) of its fault; call 0 is the reset."""
    faults = []
    for e in range(episodes):
        fault = None
        for call in range(steps + 1):
            try:
                env.reset(task) if call == 0 else env.step("look")
            except InjectedFault:
                fault = (e, call)
                break
        faults.append(fault)
    return faults


def test_the_rate_is_the_share_of_episodes_that_fault_at_reset_or_a_step():
    faults = [f for f in play(FaultyEnv(EndlessEnv(), 0.3, seed=1, horizon=5), 2000, 5) if f]
    assert 0.26 < len(faults) / 2000 < 0.34
    calls = {call for _, call in faults}
    assert calls == set(range(6))  # the reset and every step within the horizon


def test_rate_zero_never_raises_and_a_seed_repeats_its_faults():
    assert not any(play(FaultyEnv(EndlessEnv(), 0.0, seed=1, horizon=5), 500, 5))
    first = play(FaultyEnv(EndlessEnv(), 0.2, seed=7, horizon=5), 300, 5)
    assert first == play(FaultyEnv(EndlessEnv(), 0.2, seed=7, horizon=5), 300, 5)
    assert first != play(FaultyEnv(EndlessEnv(), 0.2, seed=8, horizon=5), 300, 5)


def test_the_faulty_suite_is_reproducible_and_survives_pickling():
    suite = FaultySuite(HouseholdSuite("easy"), 0.5, seed=3)
    copy = pickle.loads(pickle.dumps(suite))  # what a ProcessPool worker gets
    assert (copy.name, copy.max_steps, copy.task("train", 4)) == (suite.name, suite.max_steps, suite.task("train", 4))
    assert copy.level == "easy"  # the adapter's own attributes pass through
    task = suite.task("train", 0)
    for _ in range(3):
        a, b = suite.make_env(), copy.make_env()  # the same build counter -> the same fault stream
        assert play(a, 50, 3, task) == play(b, 50, 3, task)


def test_inline_pool_rebuilds_an_env_that_raised():
    made: list[EndlessEnv] = []

    def make_env():
        made.append(EndlessEnv())
        return FaultyEnv(made[-1], 0.999, seed=0, horizon=0)  # every episode faults at its reset

    pool = InlinePool(make_env)
    assert isinstance(pool.reset([(0, Task("t", "x"))])[0], EnvFault)
    assert made[0].closed and pool.step([(0, "look")]) == [EnvFault(REPLACED)]
    pool.reset([(0, Task("t", "x"))])
    assert len(made) == 2  # a fresh env, not the one that raised


def _collect_twice(suite, pool):
    """Two iterations on one pool, as the trainer does, so that rebuilt environments play too."""
    tasks = _tasks(suite)
    spec = PromptSpec("alfworld", 2)
    policy = RandomPolicy(0)
    return [collect(suite, tasks[k::2], 4, policy, spec, pool=pool, keep_transcripts=True) for k in (0, 1)]


def _check_batches(suite, batches, pool_faults):
    by_id = {t.task_id: t for t in _tasks(suite)}
    faulted = 0
    for batch in batches:
        faults = summarize(batch, "rollout")["rollout/faults"]
        assert faults == sum(e.fault is not None for e in batch.episodes)
        faulted += faults
        healthy = [e for e in batch.episodes if e.fault is None]
        assert all("InjectedFault" in e.fault for e in batch.episodes if e.fault)
        for e in healthy:  # replayed on a plain env, every healthy episode gives the same rewards and outcome
            env = HouseholdEnv(suite.max_steps)
            env.reset(by_id[e.task_id])
            outcomes = [env.step(turn["action"]) for turn in e.transcript]
            assert [o.reward for o in outcomes] == [turn["reward"] for turn in e.transcript]
            assert outcomes[-1].done and outcomes[-1].won == e.won
        assert any(e.won for e in healthy)
    assert faulted > 0 and faulted == pool_faults  # one fault per faulted episode


def _tasks(suite):
    return [suite.task("train", i) for i in range(32)]


def test_a_run_at_5_percent_completes_in_process():
    suite = make_suite(HouseholdEnvConfig(fault_rate=0.05))
    assert isinstance(suite, FaultySuite)
    with InlinePool(suite.make_env) as pool:
        batches = _collect_twice(suite, pool)
    _check_batches(suite, batches, pool.faults)


def test_a_run_at_5_percent_completes_in_worker_processes():
    suite = make_suite(HouseholdEnvConfig(fault_rate=0.05))
    with ProcessPool(suite.make_env, 2) as pool:
        batches = _collect_twice(suite, pool)
        assert pool.restarts == 0  # an injected fault rebuilds the env, never the worker
    _check_batches(suite, batches, pool.faults)


def test_fault_rate_zero_leaves_the_suite_alone():
    assert isinstance(make_suite(HouseholdEnvConfig()), HouseholdSuite)


def test_the_fault_share_check_stops_only_above_the_limit():
    check_fault_share(4, 8, 0.5, "iteration 7")
    check_fault_share(0, 0, 0.5, "iteration 7")
    check_fault_share(8, 8, 1.0, "iteration 7")
    with pytest.raises(UserError) as err:
        check_fault_share(5, 8, 0.5, "iteration 7")
    message = str(err.value)
    assert message.startswith("62 % of the episodes in iteration 7 (5 of 8) hit environment faults")
    assert "env.max_fault_share=0.5" in message and "\n" not in message


@pytest.mark.parametrize(
    "override,expected",
    [
        ("env.fault_rate=1.5", "env.fault_rate must be in [0, 1), got 1.5"),
        ("env.fault_rate=-0.1", "env.fault_rate must be in [0, 1), got -0.1"),
        ("env.max_fault_share=0", "env.max_fault_share must be in (0, 1], got 0"),
        ("env.max_fault_share=1.5", "env.max_fault_share must be in (0, 1], got 1.5"),
        ("trainer.max_nonfinite_updates=0", "trainer.max_nonfinite_updates must be >= 1, got 0"),
    ],
)
def test_bad_fault_settings_are_one_line_errors(override, expected):
    register_configs()
    with pytest.raises(UserError) as err:
        preflight("train", [override])
    assert str(err.value) == expected


def test_good_fault_settings_pass():
    register_configs()
    cfg = preflight("train", ["env.fault_rate=0.05", "env.max_fault_share=1", "trainer.max_nonfinite_updates=1"])
    assert (cfg.env.fault_rate, cfg.env.max_fault_share, cfg.trainer.max_nonfinite_updates) == (0.05, 1.0, 1)


@pytest.mark.slow
def test_a_training_run_at_5_percent_faults_finishes(run_cli, tmp_path):
    # 32 episodes an iteration rather than +debug=fast's 4, so that the training rollouts themselves hit faults
    result = run_cli(
        "train",
        "+debug=fast",
        "env.fault_rate=0.05",
        "trainer.iterations=3",
        "trainer.tasks_per_iteration=8",
        "trainer.group_size=4",
        f"hydra.run.dir={tmp_path / 'r'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1, 2, 3]
    assert sum(r.get("rollout/faults", 0) for r in records) > 0
