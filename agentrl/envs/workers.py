"""Environment pools: many episodes' environments behind one batched interface.

The collector steps every active episode of a turn with one call, whether the
environments live in this process (``InlinePool``) or in worker processes
(``ProcessPool``, in agentrl/envs/process_pool.py), so that slow engines
(ALFWorld: 30-90 ms a step, up to 1.7 s a reset) run in parallel and an engine
that crashes or hangs costs one episode, never the run.

- A *slot* (an int >= 0) is one episode's environment. A slot keeps its
  environment across calls: ``reset`` reuses it, so an engine is built once per
  slot, lazily, at the slot's first reset.
- ``reset(items)`` and ``step(items)`` take ``(slot, task)`` / ``(slot, action)``
  pairs and return one result per item, in the order of ``items``: an
  ``Observation`` / ``Step``, or an ``EnvFault`` when the environment broke.
  Every ``EnvFault`` returned adds one to ``pool.faults``.
- An exception in ``reset`` or ``step`` becomes an ``EnvFault`` for that slot
  only; the slot's environment is closed and dropped, and the slot's next reset
  builds a fresh one. A step on a slot whose environment was dropped (after a
  fault, or with a dead worker) returns an ``EnvFault`` without touching any
  environment: reset it first.
- A pool raises only for programming errors, the same way in both pools: a slot
  that is not an int >= 0, a slot twice in one call, a step on a slot that was
  never reset (``ValueError``), a call after ``close()`` (``RuntimeError``).

This module holds the interface every caller uses (``EnvFault``, ``EnvPool``,
``make_pool``), the slot logic both pools share, and ``InlinePool``.
``ProcessPool`` (timeouts, worker deaths, replacement) lives in
agentrl/envs/process_pool.py and is re-exported here.

Steps without waiting (``rollout.turns=ready``, agentrl/rollout/ready_turns.py): ``submit(items)`` starts the
steps of ``(slot, action)`` pairs and returns at once; ``take(timeout)`` returns ``(slot, result)`` for the
submitted steps that are done, in the order they came, waiting up to ``timeout`` seconds (None: until one is)
when none is yet. A slot is in flight from its submit to the take that returns it; a ``reset`` or ``step`` call
while steps are in flight, or a submit of a slot in flight, is a programming error. ``discard()`` forgets what is
in flight (a rollout abandoned halfway): ``ProcessPool`` kills the workers that hold it, which lose their slots.
``ProcessPool`` runs the steps of different workers at once; ``InlinePool`` runs each step at its submit, one
after another (its environments swap python's global ``random`` around their calls, agentrl/envs/own_random.py,
which threads would share).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentrl.envs.base import AgentEnv, Observation, Step, Task, contract_problem

if TYPE_CHECKING:
    from agentrl.envs.process_pool import ProcessPool  # noqa: F401  (re-exported: see __getattr__)

log = logging.getLogger(__name__)

RESET, STEP = "reset", "step"
LOST = "environment lost with its worker; reset first"
REPLACED = "environment replaced after a fault; reset first"
_MAX_MESSAGE = 500


@dataclass
class EnvFault:
    """An environment failure in place of a result."""

    message: str  # one line: what broke ("worker died", "timeout after 30.0 s in step", "ValueError: ...")


@runtime_checkable
class EnvPool(Protocol):
    """Slots of environments, reset and stepped in batches (see the module docstring)."""

    faults: int  # EnvFault results returned so far

    def reset(self, items: list[tuple[int, Task]]) -> list[Observation | EnvFault]: ...

    def step(self, items: list[tuple[int, str]]) -> list[Step | EnvFault]: ...

    def close(self) -> None: ...


def make_pool(make_env: Callable[[], AgentEnv], num_workers: int, timeout_s: float = 60.0) -> EnvPool:
    """``InlinePool`` for ``num_workers == 0``, else a ``ProcessPool`` of that many workers."""
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if num_workers == 0:
        return InlinePool(make_env)
    from agentrl.envs.process_pool import ProcessPool  # here, not at the top: process_pool imports this module

    return ProcessPool(make_env, num_workers, timeout_s=timeout_s)


def __getattr__(name: str) -> Any:
    """``from agentrl.envs.workers import ProcessPool`` keeps working, without an import cycle."""
    if name == "ProcessPool":
        from agentrl.envs.process_pool import ProcessPool

        return ProcessPool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------- shared by both pools


def describe(err: BaseException) -> str:
    """``"ValueError: first line of the message"``, at most a few hundred characters."""
    text = str(err).strip().splitlines()
    line = f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
    return line if len(line) <= _MAX_MESSAGE else line[: _MAX_MESSAGE - 3] + "..."


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:
        pass


def _apply(envs: dict[int, AgentEnv], make_env: Callable[[], AgentEnv], op: str, slot: int, arg: Any):
    """One reset or step of one slot; a failure drops the slot's environment and becomes an EnvFault."""
    env = envs.get(slot)
    try:
        if op == RESET:
            if env is None:
                env = envs[slot] = make_env()
            result = env.reset(arg)
        elif env is None:  # the pools never send this; kept so that a worker cannot crash on it
            return EnvFault(LOST)
        else:
            result = env.step(arg)
        problem = contract_problem(result, op)
        if problem is not None:  # a broken contract is that episode's fault, named by the environment's class
            raise TypeError(f"{type(env).__name__} ({type(env).__module__}): {problem}")
        return result
    except Exception as err:
        envs.pop(slot, None)
        if env is not None:
            _close_quietly(env)
        return EnvFault(describe(err))


class _SlotPool:
    """Slot bookkeeping, argument checks and the fault count common to both pools."""

    def __init__(self) -> None:
        self.faults = 0
        self._closed = False
        self._dropped: dict[int, str] = {}  # slot -> why its environment is gone (a step gets an EnvFault)
        self._live: set[int] = set()  # slots reset successfully and not dropped since
        self._dropped_now: set[int] = set()  # slots dropped during the current call
        self._in_flight: set[int] = set()  # slots submitted and not yet taken
        self._done: list[tuple[int, Any]] = []  # (slot, result) of submitted steps, not yet taken

    def reset(self, items: list[tuple[int, Task]]) -> list[Observation | EnvFault]:
        return self._call(RESET, items)

    def step(self, items: list[tuple[int, str]]) -> list[Step | EnvFault]:
        return self._call(STEP, items)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def _checked_pairs(self, call: str, items: Sequence[tuple[int, Any]], steps: bool) -> list[tuple[int, Any]]:
        """``items`` with checked slot ids: no slot twice in one call, and (``steps``) none that was never reset."""
        pairs = [(_slot_id(slot), arg) for slot, arg in items]
        slots = [slot for slot, _ in pairs]
        if len(set(slots)) != len(slots):
            raise ValueError(f"a slot appears twice in one {call} call: {sorted(slots)}")
        for slot in slots:
            if steps and slot not in self._live and slot not in self._dropped:
                raise ValueError(f"step on slot {slot}, which was never reset")
        return pairs

    def _call(self, op: str, items: Sequence[tuple[int, Any]]) -> list:
        self._check_open()
        if self._in_flight:
            raise RuntimeError(f"{op} while submitted steps are in flight (take them first): {sorted(self._in_flight)}")
        pairs = self._checked_pairs(op, items, steps=op == STEP)
        results: list = [None] * len(pairs)
        todo: list[tuple[int, int, Any]] = []  # (index in items, slot, arg)
        for i, (slot, arg) in enumerate(pairs):
            if op == RESET or slot in self._live:
                todo.append((i, slot, arg))
            else:
                results[i] = EnvFault(self._dropped[slot])
        self._dropped_now = set()
        if todo:
            for (i, _slot, _), result in zip(todo, self._run(op, [(slot, arg) for _, slot, arg in todo])):
                results[i] = result
        for (slot, _), result in zip(pairs, results):
            if isinstance(result, EnvFault):
                self.faults += 1
                # the collector logs it once, with the episode's task (agentrl/rollout/collector.py: _fault)
                log.debug("environment fault in %s of slot %d: %s", op, slot, result.message)
                if slot not in self._dropped_now:  # else a worker's loss in this call marked it
                    self._drop(slot, REPLACED)
            else:
                self._live.add(slot)
                self._dropped.pop(slot, None)
        return results

    # ------------------------------------------------------------ steps without waiting (see the module docstring)

    def submit(self, items: list[tuple[int, str]]) -> None:
        """Start the steps of ``(slot, action)`` pairs and return; ``take`` returns their results."""
        self._check_open()
        pairs = self._checked_pairs("submit", items, steps=True)
        for slot, _ in pairs:
            if slot in self._in_flight:
                raise ValueError(f"submit on slot {slot}, whose step is in flight")
        self._before_submit()
        todo = []
        for slot, arg in pairs:
            self._in_flight.add(slot)
            if slot in self._live:
                todo.append((slot, arg))
            else:
                self._done.append((slot, EnvFault(self._dropped[slot])))
        if todo:
            self._start(todo)

    def take(self, timeout: float | None = None) -> list[tuple[int, Step | EnvFault]]:
        """``(slot, result)`` of the submitted steps that are done; waits up to ``timeout`` s (None: until one
        is) while none is; ``[]`` when nothing is in flight."""
        self._check_open()
        if not self._done and self._in_flight:
            self._arrived(timeout)
        done, self._done = self._done, []
        for slot, result in done:
            self._in_flight.discard(slot)
            if isinstance(result, EnvFault):
                self.faults += 1
                log.debug("environment fault in step of slot %d: %s", slot, result.message)
                if slot in self._live:  # else a worker's loss dropped it already
                    self._drop(slot, REPLACED)
            else:
                self._live.add(slot)
                self._dropped.pop(slot, None)
        return done

    @property
    def in_flight(self) -> int:
        """Submitted steps not yet taken."""
        return len(self._in_flight)

    def discard(self) -> None:
        """Forget the steps in flight; their slots' environments are dropped (reset them first)."""
        for slot in self._in_flight:
            self._drop(slot, REPLACED)
        self._in_flight, self._done = set(), []
        self._abandon()

    def _before_submit(self) -> None:
        pass

    def _start(self, items: list[tuple[int, Any]]) -> None:
        raise NotImplementedError

    def _arrived(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` for results of steps in flight and add them to ``self._done``."""
        raise NotImplementedError

    def _abandon(self) -> None:
        pass

    def _drop(self, slot: int, why: str) -> None:
        self._live.discard(slot)
        self._dropped[slot] = why
        self._dropped_now.add(slot)

    def _run(self, op: str, items: list[tuple[int, Any]]) -> list:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _slot_id(slot: Any) -> int:
    try:
        value = operator.index(slot)
    except TypeError:
        raise ValueError(f"a slot id must be an int >= 0, got {slot!r}") from None
    if value < 0 or isinstance(slot, bool):
        raise ValueError(f"a slot id must be an int >= 0, got {slot!r}")
    return value


# ---------------------------------------------------------------- in-process


class InlinePool(_SlotPool):
    """All environments in this process, called one after another; no timeout (a hang hangs)."""

    def __init__(self, make_env: Callable[[], AgentEnv]):
        super().__init__()
        self._make_env = make_env
        self._envs: dict[int, AgentEnv] = {}

    def _run(self, op: str, items: list[tuple[int, Any]]) -> list:
        return [_apply(self._envs, self._make_env, op, slot, arg) for slot, arg in items]

    def _start(self, items: list[tuple[int, Any]]) -> None:  # at once, in order: nothing runs beside the caller
        self._done.extend((slot, _apply(self._envs, self._make_env, STEP, slot, arg)) for slot, arg in items)

    def _arrived(self, timeout: float | None) -> None:
        pass  # every submitted step is done at its submit

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        envs, self._envs = self._envs, {}
        for env in envs.values():
            _close_quietly(env)
