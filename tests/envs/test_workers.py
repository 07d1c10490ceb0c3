"""Environment pools: in-process and worker processes behind one interface, faults, crashes, hangs."""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agentrl.envs.base import Observation, Step, Task
from agentrl.envs.household import HouseholdEnv, HouseholdSuite
from agentrl.envs.workers import LOST, REPLACED, EnvFault, EnvPool, InlinePool, ProcessPool, make_pool

SUITE = HouseholdSuite("easy")
REPO = Path(__file__).resolve().parents[2]


class TroubleEnv:
    """A household env that misbehaves on magic actions (top-level, so that spawn can pickle its factory)."""

    def __init__(self, max_steps: int = 50):
        self.inner = HouseholdEnv(max_steps)

    def reset(self, task: Task) -> Observation:
        if task.task_id == "raise-on-reset":
            raise KeyError("no such task")
        return self.inner.reset(task)

    def step(self, action: str) -> Step:
        if action == "raise":
            raise ValueError("boom\nsecond line")
        if action == "exit":
            os._exit(3)
        if action.startswith("sleep "):
            time.sleep(float(action.split()[1]))
        if action == "unpicklable":
            return Step(Observation("x", [], "", anchor_key=threading.Lock()), 0.0, False, False, True)
        if action == "pid":
            return Step(Observation(str(os.getpid()), [], ""), 0.0, False, False, True)
        if action == "int observation":  # a plug-in that breaks the contract: observations are text
            return Step(Observation(7, [], ""), 0.0, False, False, True)
        if action == "no step":
            return "fine"
        if action == "text reward":
            return Step(Observation("x", [], ""), "10", False, False, True)
        return self.inner.step(action)

    def close(self) -> None:
        self.inner.close()


def make_trouble(max_steps: int = 50) -> TroubleEnv:
    return TroubleEnv(max_steps)


def tasks(n: int, split: str = "train") -> list[Task]:
    return [SUITE.task(split, i) for i in range(n)]


def fork_pool(workers: int = 2, **kw) -> ProcessPool:
    return ProcessPool(make_trouble, workers, start_method="fork", **kw)


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.02)
    return False


def play(pool: EnvPool, episodes: list[Task], seed: int = 0) -> list:
    """Random admissible play of all episodes in lockstep; every result in order."""
    rng = random.Random(seed)
    log = list(pool.reset(list(enumerate(episodes))))
    current = dict(enumerate(log))
    while True:
        active = [s for s, r in current.items() if isinstance(r, Observation) or (isinstance(r, Step) and not r.done)]
        if not active:
            return log
        obs = {s: current[s] if isinstance(current[s], Observation) else current[s].observation for s in active}
        steps = pool.step([(s, rng.choice(obs[s].admissible_actions)) for s in active])
        log.extend(steps)
        current.update(zip(active, steps))


# ---------------------------------------------------------------- one interface, same results


def test_inline_and_spawned_workers_give_identical_episodes():
    episodes = tasks(12)
    with InlinePool(SUITE.make_env) as inline:
        expected = play(inline, episodes)
    with ProcessPool(SUITE.make_env, 3, timeout_s=30) as pool:  # spawn, a bound method as the factory
        got = play(pool, episodes)
        assert pool.faults == 0
    assert len(expected) > 12 and all(isinstance(r, (Observation, Step)) for r in expected)
    assert got == expected
    assert any(r.won for r in expected if isinstance(r, Step))


def test_slots_reuse_their_env_and_results_follow_item_order():
    made = []

    def counted():
        made.append(1)
        return HouseholdEnv(8)

    with InlinePool(counted) as pool:
        t = tasks(3)
        pool.reset([(7, t[0]), (2, t[1])])
        pool.reset([(2, t[2]), (7, t[1])])
        assert len(made) == 2  # built lazily, once per slot
        with fork_pool(2) as procs:
            for p in (pool, procs):
                got = p.reset([(5, t[2]), (0, t[0]), (3, t[1])])
                assert [o.task_description for o in got] == [
                    HouseholdEnv(8).reset(x).task_description for x in (t[2], t[0], t[1])
                ]


def test_make_pool_picks_the_pool_kind():
    with make_pool(SUITE.make_env, 0, 5.0) as pool:
        assert isinstance(pool, InlinePool) and isinstance(pool, EnvPool)
    with make_pool(functools.partial(make_trouble, 8), 1, 5.0) as pool:
        assert isinstance(pool, ProcessPool) and pool.timeout_s == 5.0
        assert isinstance(pool.reset([(0, tasks(1)[0])])[0], Observation)


# ---------------------------------------------------------------- faults inside an env


@pytest.mark.parametrize("kind", ["inline", "fork", "spawn"])
def test_an_env_exception_faults_only_its_slot(kind):
    if kind == "inline":
        pool = InlinePool(make_trouble)
    else:
        pool = ProcessPool(functools.partial(make_trouble, 50), 2, timeout_s=30, start_method=kind)
    with pool:
        obs = pool.reset(list(enumerate(tasks(4))))
        got = pool.step(
            [
                (0, obs[0].admissible_actions[0]),
                (1, "raise"),
                (2, obs[2].admissible_actions[0]),
                (3, obs[3].admissible_actions[0]),
            ]
        )
        assert got[1] == EnvFault("ValueError: boom")
        assert all(isinstance(got[i], Step) for i in (0, 2, 3))
        assert pool.faults == 1
        # the slot's env is gone until a reset; the others go on
        again = pool.step([(1, "look"), (0, got[0].observation.admissible_actions[0])])
        assert again[0] == EnvFault(REPLACED) and isinstance(again[1], Step)
        assert pool.faults == 2
        fresh = pool.reset([(1, tasks(2)[1])])
        assert fresh == [obs[1]]
        assert isinstance(pool.step([(1, fresh[0].admissible_actions[0])])[0], Step)
        # a reset that raises: a fault, and a step needs a new reset
        bad = Task("raise-on-reset", "pick_and_place", 0, tasks(1)[0].payload)
        assert pool.reset([(2, bad)]) == [EnvFault("KeyError: 'no such task'")]
        assert pool.step([(2, "look")]) == [EnvFault(REPLACED)]
        assert pool.faults == 4


@pytest.mark.parametrize("kind", ["inline", "fork"])
def test_programming_errors_raise_the_same_way(kind):
    pool = InlinePool(make_trouble) if kind == "inline" else fork_pool(1)
    with pool:
        with pytest.raises(ValueError, match="never reset"):
            pool.step([(0, "look")])
        with pytest.raises(ValueError, match="twice"):
            pool.reset([(1, tasks(1)[0]), (1, tasks(1)[0])])
        with pytest.raises(ValueError, match="int >= 0"):
            pool.reset([(-1, tasks(1)[0])])
        with pytest.raises(ValueError, match="int >= 0"):
            pool.reset([("a", tasks(1)[0])])
        assert pool.faults == 0
        assert pool.reset([]) == [] and pool.step([]) == []
    with pytest.raises(RuntimeError, match="closed"):
        pool.reset([(0, tasks(1)[0])])


def test_an_unpicklable_factory_is_refused_clearly():
    with pytest.raises(TypeError, match="picklable"):
        ProcessPool(lambda: HouseholdEnv(8), 1)


def test_a_make_env_that_raises_is_a_fault_at_reset():
    def broken():
        raise OSError("engine missing")

    with InlinePool(broken) as pool:
        assert pool.reset([(0, tasks(1)[0])]) == [EnvFault("OSError: engine missing")]
        assert pool.faults == 1


# ---------------------------------------------------------------- dead and hung workers


def test_a_worker_killed_during_a_call_faults_its_pending_items_and_is_replaced():
    with fork_pool(2, timeout_s=20) as pool:
        obs = pool.reset(list(enumerate(tasks(4))))  # worker 0: slots 0, 2; worker 1: slots 1, 3
        victim = pool.pids[0]
        threading.Timer(0.3, os.kill, (victim, signal.SIGKILL)).start()
        start = time.monotonic()
        got = pool.step(
            [(0, "sleep 5"), (1, obs[1].admissible_actions[0]), (2, "look"), (3, obs[3].admissible_actions[0])]
        )
        assert time.monotonic() - start < 3
        assert got[0] == EnvFault("worker died (exit code -9) in step") == got[2]
        assert isinstance(got[1], Step) and isinstance(got[3], Step)
        assert pool.faults == 2 and pool.restarts == 1
        assert pool.pids[0] != victim and not alive(victim)
        # worker 1's episodes go on; worker 0's slots need a reset, which works on the new worker
        assert isinstance(pool.step([(1, got[1].observation.admissible_actions[0])])[0], Step)
        assert pool.step([(0, "look")]) == [EnvFault(LOST)]
        assert pool.reset([(0, tasks(1)[0]), (2, tasks(3)[2])]) == [obs[0], obs[2]]
        assert pool.step([(2, "pid")])[0].observation.text == str(pool.pids[0])


def test_a_worker_that_dies_between_calls_loses_all_its_slots():
    with fork_pool(2, timeout_s=20) as pool:
        obs = pool.reset(list(enumerate(tasks(4))))
        os.kill(pool.pids[1], signal.SIGKILL)
        time.sleep(0.1)
        got = pool.step([(s, obs[s].admissible_actions[0]) for s in range(4)])
        assert got[1] == got[3] == EnvFault(LOST)
        assert isinstance(got[0], Step) and isinstance(got[2], Step)
        assert pool.reset([(3, tasks(4)[3])]) == [obs[3]]


def test_an_env_that_exits_the_process_is_a_worker_death():
    with fork_pool(1, timeout_s=20) as pool:
        pool.reset([(0, tasks(1)[0]), (1, tasks(2)[1])])
        got = pool.step([(0, "exit"), (1, "look")])
        assert got == [EnvFault("worker died (exit code 3) in step")] * 2
        assert isinstance(pool.reset([(1, tasks(2)[1])])[0], Observation)


def test_a_hanging_env_times_out_and_other_workers_are_unaffected():
    with fork_pool(2, timeout_s=1.0) as pool:
        obs = pool.reset(list(enumerate(tasks(4))))
        start = time.monotonic()
        got = pool.step([(0, "sleep 30"), (1, obs[1].admissible_actions[0]), (2, "look"), (3, "sleep 0.2")])
        elapsed = time.monotonic() - start
        assert 0.9 <= elapsed < 2.5
        assert got[0] == EnvFault("timeout after 1 s in step")
        assert got[2] == EnvFault("worker restarted after a timeout in another slot's step")
        assert isinstance(got[1], Step) and isinstance(got[3], Step)
        assert pool.faults == 2 and pool.restarts == 1
        assert pool.step([(0, "look"), (2, "look")]) == [EnvFault(LOST)] * 2
        assert pool.reset([(0, tasks(1)[0])]) == [obs[0]]


def test_the_timeout_bounds_one_env_call_not_the_batch():
    with fork_pool(1, timeout_s=1.5) as pool:
        pool.reset(list(enumerate(tasks(4))))
        got = pool.step([(s, "sleep 0.5") for s in range(4)])  # 2 s in all, 0.5 s each
        assert all(isinstance(r, Step) for r in got) and pool.faults == 0


# ---------------------------------------------------------------- process hygiene


def test_an_unpicklable_result_is_a_fault_not_a_crash():
    with fork_pool(1) as pool:
        pool.reset([(0, tasks(1)[0]), (1, tasks(2)[1])])
        got = pool.step([(0, "unpicklable"), (1, "pid")])
        assert isinstance(got[0], EnvFault) and got[0].message.startswith("result cannot be sent from the worker")
        assert got[1].observation.text == str(pool.pids[0]) and pool.restarts == 0


def test_a_call_interrupted_by_ctrl_c_leaves_the_pool_usable():
    # Python's own Ctrl-C handler: a job started in the background by a non-interactive shell inherits
    # SIGINT ignored, and Python then installs no handler, so no KeyboardInterrupt would ever come
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_a_call()
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_a_call():
    with fork_pool(2, timeout_s=20) as pool:
        obs = pool.reset(list(enumerate(tasks(2))))
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # to this process only
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            pool.step([(0, "look"), (1, "sleep 3")])
        assert time.monotonic() - start < 2
        # worker 0 had answered and goes on; worker 1's late answer must not become the next call's result
        after = pool.step([(0, "look"), (1, "look")])
        assert isinstance(after[0], Step) and after[1] == EnvFault(LOST)
        assert pool.reset([(0, tasks(1)[0]), (1, tasks(2)[1])]) == obs
        assert [r.observation.text for r in pool.step([(0, "pid"), (1, "pid")])] == [str(p) for p in pool.pids]


def test_workers_ignore_sigint():
    with fork_pool(1) as pool:
        pool.reset([(0, tasks(1)[0])])
        pid = pool.pids[0]
        os.kill(pid, signal.SIGINT)
        time.sleep(0.1)
        assert pool.step([(0, "pid")])[0].observation.text == str(pid)


def test_close_twice_and_context_manager_leave_no_workers():
    with fork_pool(3) as pool:
        pool.reset(list(enumerate(tasks(3))))
        pids = pool.pids
        assert all(alive(p) for p in pids)
    assert wait_gone(pids, within=0.5)
    pool.close()  # twice: a no-op
    inline = InlinePool(make_trouble)
    inline.reset([(0, tasks(1)[0])])
    inline.close()
    inline.close()


def test_a_worker_exits_when_the_parent_closes_its_pipe():
    with fork_pool(2) as pool:
        pid = pool.pids[0]
        pool._workers[0].conn.close()  # as if the parent went away; worker 1 holds no copy of it
        assert wait_gone([pid], within=2.0)


def test_workers_exit_when_the_parent_process_dies():
    script = textwrap.dedent("""
        import os, sys
        from agentrl.envs.household import HouseholdSuite
        from agentrl.envs.workers import ProcessPool
        pool = ProcessPool(HouseholdSuite("easy").make_env, 2, start_method=sys.argv[1])
        pool.reset([(0, HouseholdSuite("easy").task("train", 0)), (1, HouseholdSuite("easy").task("train", 1))])
        print(*pool.pids, flush=True)
        os._exit(0)  # no cleanup at all
    """)
    for method in ("fork", "spawn"):
        out = subprocess.run(
            [sys.executable, "-c", script, method],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        pids = [int(p) for p in out.stdout.split()]
        assert len(pids) == 2, out.stderr
        assert wait_gone(pids, within=5.0), method


@pytest.mark.parametrize("kind", ["inline", "fork"])
@pytest.mark.parametrize(
    "action,problem",
    [
        ("int observation", "Observation.text is int, not str"),
        ("no step", "step returned str, not agentrl.envs.base.Step"),
        ("text reward", "Step.reward is str, not a number"),
    ],
)
def test_a_broken_contract_is_a_fault_that_names_the_environment(kind, action, problem):
    pool = InlinePool(make_trouble) if kind == "inline" else fork_pool(1)
    with pool:
        pool.reset([(0, tasks(1)[0])])
        (got,) = pool.step([(0, action)])
        assert got == EnvFault(f"TypeError: TroubleEnv ({TroubleEnv.__module__}): {problem}")
        assert pool.faults == 1
