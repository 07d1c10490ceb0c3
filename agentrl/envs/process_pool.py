"""Environments in worker processes: timeouts, deaths, replacement.

``ProcessPool`` places slot ``s`` in worker ``s % num_workers``. A worker that
dies (segfault, ``os._exit``, killed) or does not answer within ``timeout_s`` is
killed and replaced by a fresh process; its pending items come back as
``EnvFault`` and every slot it hosted starts from a fresh environment at its next
reset. ``timeout_s`` bounds one environment call (one reset or one step), not a
whole batch: a worker sends each result as soon as it has it.

``make_env`` is sent to the workers, so with the ``spawn`` start method (the
default; safe with CUDA and threads in the parent) it must be picklable: a
top-level function, a ``functools.partial`` of one, or a bound method of a
picklable object (``HouseholdSuite("easy").make_env``); not a lambda or a local
function. The worker imports the module that defines it.

Submitted steps (``submit`` / ``take``, rollout.turns=ready) go to their workers at once and come back as
each is done; ``timeout_s`` bounds them the same way, from the submit or the worker's last result.

The interface and the slot logic shared with ``InlinePool`` are in
agentrl/envs/workers.py (see its docstring).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

from agentrl.envs.base import AgentEnv
from agentrl.envs.workers import (
    LOST,
    RESET,
    STEP,
    EnvFault,
    _apply,
    _close_quietly,
    _SlotPool,
    describe,
    log,  # the same logger as before the split: agentrl.envs.workers
)

_PARENT_CHECK_S = 2.0  # how often an idle worker checks that its parent still lives


def _worker_main(conn: Connection, make_env: Callable[[], AgentEnv], inherited: list[Connection]) -> None:
    """A worker: receive ``(op, [(slot, arg), ...])``, send back one result per item as each is done.

    Ends on ``None``, when the parent's end of the pipe closes, or when the parent dies.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    for end in inherited:  # fork: copies of the parent's ends would hide the parent closing them
        end.close()
    parent = os.getppid()
    envs: dict[int, AgentEnv] = {}
    try:
        while True:
            if not conn.poll(_PARENT_CHECK_S):
                if os.getppid() != parent:
                    break
                continue
            message = conn.recv()
            if message is None:
                break
            op, items = message
            for slot, arg in items:
                _send(conn, _apply(envs, make_env, op, slot, arg))
    except (EOFError, OSError):
        pass
    finally:
        for env in envs.values():
            _close_quietly(env)


def _send(conn: Connection, result: Any) -> None:
    """``conn.send``, except that a result that cannot be pickled becomes an EnvFault."""
    try:
        data = ForkingPickler.dumps(result)
    except Exception as err:
        data = ForkingPickler.dumps(EnvFault(f"result cannot be sent from the worker: {describe(err)}"))
    conn.send_bytes(data)


def _loads(data: bytes) -> Any:
    try:
        return pickle.loads(data)
    except Exception as err:
        return EnvFault(f"result from the worker cannot be read: {describe(err)}")


class _Worker:
    def __init__(self, ctx, make_env: Callable[[], AgentEnv], index: int, others: list[Connection]):
        self.conn, child = ctx.Pipe(duplex=True)
        inherited = [self.conn, *others] if ctx.get_start_method() == "fork" else []
        self.process = ctx.Process(
            target=_worker_main, args=(child, make_env, inherited), name=f"agentrl-env-worker-{index}", daemon=True
        )
        try:
            self.process.start()
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            self.conn.close()
            child.close()
            raise TypeError(
                f"make_env must be picklable to reach a worker process "
                f"(a top-level function or a functools.partial of one): {describe(err)}"
            ) from err
        child.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.exitcode is None

    def kill(self) -> None:
        if self.process.exitcode is None:
            self.process.kill()
        self.process.join(timeout=5.0)
        self.conn.close()


class ProcessPool(_SlotPool):
    """Environments in ``num_workers`` processes; slot ``s`` lives in worker ``s % num_workers``."""

    def __init__(
        self, make_env: Callable[[], AgentEnv], num_workers: int, timeout_s: float = 60.0, start_method: str = "spawn"
    ):
        super().__init__()
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.restarts = 0  # workers replaced after dying or timing out
        self._make_env = make_env
        self._ctx = mp.get_context(start_method)
        self._hosted: list[set[int]] = [set() for _ in range(num_workers)]  # slots each worker has built
        self._flight: list[list[int]] = [[] for _ in range(num_workers)]  # submitted slots per worker, in order
        self._flight_deadline: dict[int, float] = {}  # worker -> when its oldest submitted step times out
        self._workers: list[_Worker] = []
        try:
            for w in range(num_workers):
                self._workers.append(_Worker(self._ctx, make_env, w, self._parent_ends()))
        except BaseException:
            self.close()
            raise

    def _parent_ends(self) -> list[Connection]:
        return [worker.conn for worker in self._workers if not worker.conn.closed]

    @property
    def pids(self) -> list[int | None]:
        """The worker process ids, by worker index (they change when a worker is replaced)."""
        return [worker.pid for worker in self._workers]

    def _run(self, op: str, items: list[tuple[int, Any]]) -> list:
        for w, worker in enumerate(self._workers):  # died between calls: replace it before sending anything
            if not worker.alive():
                self._replace(w, f"worker died (exit code {worker.process.exitcode}) between calls")
        shares: dict[int, list[int]] = {}  # worker -> positions in items, in order
        for i, (slot, _) in enumerate(items):
            shares.setdefault(slot % self.num_workers, []).append(i)
        results: list = [None] * len(items)
        pending: dict[int, list[int]] = {}  # worker -> positions still waiting for a result
        deadline: dict[int, float] = {}
        try:
            for w, positions in shares.items():
                if op == RESET:
                    self._hosted[w].update(items[i][0] for i in positions)
                pending[w] = list(positions)
                deadline[w] = time.monotonic() + self.timeout_s
                try:
                    self._workers[w].conn.send((op, [items[i] for i in positions]))
                except (OSError, EOFError):
                    del pending[w], deadline[w]
                    self._fail(w, positions, results, self._death_message(w, op))
            self._collect(op, pending, deadline, results)
        except BaseException:  # Ctrl-C mid-call: results still on their way would answer the next call
            for w in pending:
                self._workers[w].kill()  # replaced, its slots lost, at the next call
            raise
        return results

    def _collect(self, op: str, pending: dict, deadline: dict, results: list) -> None:
        while pending:
            waits = {}
            for w in pending:
                waits[self._workers[w].conn] = w
                waits[self._workers[w].process.sentinel] = w
            timeout = max(0.0, min(deadline.values()) - time.monotonic())
            ready = wait(list(waits), timeout)
            for w in {waits[r] for r in ready}:
                self._gather(w, op, pending, deadline, results)
            now = time.monotonic()
            for w in [w for w in pending if deadline[w] <= now]:
                self._fail(
                    w,
                    pending.pop(w),
                    results,
                    f"timeout after {self.timeout_s:g} s in {op}",
                    f"worker restarted after a timeout in another slot's {op}",
                )
                del deadline[w]

    def _gather(self, w: int, op: str, pending: dict, deadline: dict, results: list) -> None:
        """Read every result worker ``w`` has ready; replace it if it died."""
        conn = self._workers[w].conn
        try:
            while pending[w] and conn.poll():
                results[pending[w].pop(0)] = _loads(conn.recv_bytes())
                deadline[w] = time.monotonic() + self.timeout_s
        except (EOFError, OSError):
            pass
        else:
            if pending[w] and self._workers[w].alive():
                return
        if pending[w]:
            self._fail(w, pending[w], results, self._death_message(w, op))
        del pending[w], deadline[w]

    def _death_message(self, w: int, op: str) -> str:
        process = self._workers[w].process
        process.join(timeout=1.0)  # the exit code, once the process is gone
        code = process.exitcode
        return f"worker died (exit code {code}) in {op}" if code is not None else f"worker lost its pipe in {op}"

    def _fail(self, w: int, positions: list[int], results: list, message: str, others: str | None = None) -> None:
        """Fault the pending items of worker ``w`` (the first one gets ``message``) and replace the worker."""
        for k, i in enumerate(positions):
            results[i] = EnvFault(message if k == 0 or others is None else others)
        self._replace(w, message)

    def _replace(self, w: int, why: str) -> None:
        old = self._workers[w]
        log.warning("env worker %d (pid %s) replaced: %s", w, old.pid, why)
        old.kill()
        for slot in self._hosted[w]:
            self._drop(slot, LOST)
        self._hosted[w] = set()
        self.restarts += 1
        self._workers[w] = _Worker(self._ctx, self._make_env, w, self._parent_ends())

    # ------------------------------------------------------------ submitted steps (workers.py: submit, take)

    def _before_submit(self) -> None:
        for w, worker in enumerate(self._workers):  # died while idle: replace it before sending anything
            if not self._flight[w] and not worker.alive():
                self._replace(w, f"worker died (exit code {worker.process.exitcode}) between calls")

    def _start(self, items: list[tuple[int, Any]]) -> None:
        shares: dict[int, list[tuple[int, Any]]] = {}
        for slot, arg in items:
            shares.setdefault(slot % self.num_workers, []).append((slot, arg))
        for w, share in shares.items():
            try:
                self._workers[w].conn.send((STEP, share))
            except (OSError, EOFError):
                self._flight[w].extend(slot for slot, _ in share)
                self._fail_flight(w, self._death_message(w, STEP))
                continue
            if not self._flight[w]:
                self._flight_deadline[w] = time.monotonic() + self.timeout_s
            self._flight[w].extend(slot for slot, _ in share)

    def _arrived(self, timeout: float | None) -> None:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            busy = [w for w in range(self.num_workers) if self._flight[w]]
            if not busy:
                return
            waits = {}
            for w in busy:
                waits[self._workers[w].conn] = w
                waits[self._workers[w].process.sentinel] = w
            now = time.monotonic()
            limit = min(self._flight_deadline[w] for w in busy) - now
            if end is not None:
                limit = min(limit, end - now)
            ready = {waits[r] for r in wait(list(waits), max(0.0, limit))}
            for w in busy:  # every worker with results: the ones that came while waiting on the first
                if w in ready or self._workers[w].conn.poll():
                    self._gather_flight(w)
            now = time.monotonic()
            for w in [w for w in busy if self._flight[w] and self._flight_deadline[w] <= now]:
                self._fail_flight(
                    w,
                    f"timeout after {self.timeout_s:g} s in {STEP}",
                    f"worker restarted after a timeout in another slot's {STEP}",
                )
            if self._done or (end is not None and now >= end):
                return

    def _gather_flight(self, w: int) -> None:
        """Read every result worker ``w`` has sent of its submitted steps; replace it if it died."""
        conn, flight = self._workers[w].conn, self._flight[w]
        try:
            while flight and conn.poll():
                self._done.append((flight.pop(0), _loads(conn.recv_bytes())))
                self._flight_deadline[w] = time.monotonic() + self.timeout_s
        except (EOFError, OSError):
            pass
        else:
            if not flight or self._workers[w].alive():
                return
        if flight:
            self._fail_flight(w, self._death_message(w, STEP))

    def _fail_flight(self, w: int, message: str, others: str | None = None) -> None:
        """Fault worker ``w``'s submitted steps (the first one gets ``message``) and replace the worker."""
        flight, self._flight[w] = self._flight[w], []
        for k, slot in enumerate(flight):
            self._done.append((slot, EnvFault(message if k == 0 or others is None else others)))
        self._flight_deadline.pop(w, None)
        self._replace(w, message)

    def _abandon(self) -> None:
        for w, flight in enumerate(self._flight):  # results still on their way would answer the next call
            if flight:
                self._workers[w].kill()  # replaced, its slots lost, at the next call
                flight.clear()
        self._flight_deadline.clear()

    def close(self, timeout_s: float = 2.0) -> None:
        """Ask every worker to stop, then terminate and kill what has not exited in ``timeout_s``."""
        if self._closed:
            return
        self._closed = True
        workers, self._workers = self._workers, []
        for worker in workers:
            try:
                worker.conn.send(None)
            except (OSError, EOFError):
                pass
        end = time.monotonic() + timeout_s
        for worker in workers:
            worker.process.join(timeout=max(0.0, end - time.monotonic()))
        for worker in workers:
            if worker.process.exitcode is None:
                worker.process.terminate()
                worker.process.join(timeout=0.5)
            worker.kill()

    def __del__(self) -> None:
        try:
            self.close(timeout_s=0.5)
        except Exception:
            pass
