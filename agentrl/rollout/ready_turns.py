"""Turns without lockstep (`rollout.turns=ready`): each episode plays its next turn as soon as its environment
has answered, so that one slow step holds back its own episode only.

The loop: the episodes whose environment has answered are generated for in one call (`policy.act_keyed`), their
actions are submitted to the pool without waiting (`EnvPool.submit`), and whatever steps are done are taken
(`EnvPool.take`) to make the next ready set. After the first answer the loop waits for more, until every step in
flight has answered or as long as the last generation took (at least `LINGER_S`): generation is one call at a time,
so an answer that comes during a lone episode's generation would have waited as long. A row and its content never
depend on which episodes shared its
generation: the policy's `act_keyed` makes each reply a function of the turn and its key alone (HF: a width of its
own, a generator of its own; agentrl/rollout/policies.py), the key is drawn from the rollout's seed, the episode and
the step (`turn_key`), and the rows are put in lockstep's order (by step, then episode) at the end.

What lockstep does stays: resets in one call, faults and timeouts ending their episode only, `max_steps` per
episode, the rollout's `lockstep` callable asked before the first episode plays each turn number and once at the
end (a stop abandons the rollout: `RolloutAbandoned`), and `on_turn(t, limit)` once every episode has played turn t.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from agentrl.envs.base import Task, TaskSuite
from agentrl.envs.workers import EnvPool, InlinePool
from agentrl.errors import UserError
from agentrl.rollout.batch import EpisodeResult, StepBatch
from agentrl.rollout.collector import (
    Lockstep,
    Policy,
    PromptSpec,
    _advance,
    _agreed,
    _ended,
    _episodes,
    _keep_messages,
    _reset,
    _row,
    _turns,
    _with_outcomes,
)
from agentrl.rollout.dialects import make_dialect

# after the first answer, the loop waits for more before it generates: at least LINGER_S, at most LINGER_SHARE of the
# last generation's time (see the module docstring)
LINGER_S = 0.005
LINGER_SHARE = 1.0


def turn_key(seed: int, episode: int, step: int) -> int:
    """The seed of one turn's sampling: a function of the rollout's seed, the episode and the step alone."""
    return int(np.random.SeedSequence([seed, episode, step]).generate_state(1, np.uint64)[0] >> 1)


class _Edges:
    """When to ask `lockstep` (before the first episode plays turn t) and to report `on_turn` (after the last)."""

    def __init__(self, lockstep: Lockstep | None, on_turn: Callable[[int, int], None] | None, limit: int):
        self.lockstep, self.on_turn, self.limit = lockstep, on_turn, limit
        self.asked = 0  # turn numbers asked about so far
        self.reported = 0  # turns reported so far

    def lead(self, turn: int) -> bool:
        """Ask about every turn number up to `turn`; False where the ranks agree to play no more."""
        while self.lockstep is not None and self.asked <= turn:
            going = _agreed(self.lockstep, True, self.asked)
            self.asked += 1
            if not going:
                return False
        return True

    def trail(self, played: int) -> None:
        """Every episode has played its turns below `played`."""
        while self.on_turn is not None and self.reported < played:
            self.reported += 1
            self.on_turn(self.reported, self.limit)

    def finish(self, stopped: bool) -> None:
        """As lockstep ends: a rank done early asks on until every rank is, then once more for the last turn."""
        if self.lockstep is None:
            return
        if not stopped:
            for t in range(self.asked, self.limit):
                if not _agreed(self.lockstep, False, t):
                    break
        _agreed(self.lockstep, False, self.limit)


def collect_ready(
    suite: TaskSuite,
    tasks: Sequence[Task],
    group_size: int,
    policy: Policy,
    prompt: PromptSpec,
    *,
    max_steps: int | None = None,
    pool: EnvPool | None = None,
    keep_transcripts: bool = False,
    on_turn: Callable[[int, int], None] | None = None,
    lockstep: Lockstep | None = None,
    on_episode_end: Callable[[EpisodeResult], None] | None = None,
) -> StepBatch:
    """`collect`'s rows (agentrl/rollout/collector.py) with each episode's turns played as its environment answers."""
    act_keyed = getattr(policy, "act_keyed", None)
    if act_keyed is None or not hasattr(policy, "rollout_seed"):
        raise UserError(
            f"rollout.turns=ready needs a policy whose replies do not depend on the batch (act_keyed and "
            f"rollout_seed); {type(policy).__name__} has none: use rollout.turns=lockstep"
        )
    limit = max_steps or suite.max_steps
    dialect = make_dialect(prompt, suite, policy)
    own_pool = pool is None
    if pool is None:
        pool = InlinePool(suite.make_env)
    episodes = _episodes(tasks, group_size, dialect, keep_messages=keep_transcripts)
    by_slot = {ep.index: ep for ep in episodes}
    played = {ep.index: 0 for ep in episodes}  # turns each episode has played
    rows = []
    edges = _Edges(lockstep, on_turn, limit)
    try:
        _reset(pool, episodes)
        for ep in episodes:
            if ep.done:  # its reset faulted
                _ended(ep, on_episode_end)
        seed = policy.rollout_seed()
        ready = [ep for ep in episodes if not ep.done]
        waiting: dict[int, tuple] = {}  # slot -> (turn, reply, parsed action, action) of its step in flight
        stopped, generation_s = False, 0.0
        while True:
            if ready and not stopped and not edges.lead(max(played[ep.index] for ep in ready)):
                stopped = True  # the ranks agree to play no more: the steps in flight still count
            if ready and not stopped:
                ready, turns = _turns(ready, dialect, [played[ep.index] for ep in ready], on_episode_end)
                started = time.monotonic()
                replies = act_keyed(turns, [turn_key(seed, ep.index, played[ep.index]) for ep in ready])
                generation_s = time.monotonic() - started
                readings = [dialect.read(turn, reply) for turn, reply in zip(turns, replies)]
                for ep, turn, reply, reading in zip(ready, turns, replies, readings):
                    waiting[ep.index] = (turn, reply, reading)
                pool.submit([(ep.index, reading.action) for ep, reading in zip(ready, readings)])
            ready = []
            if not waiting:
                break
            answers = pool.take(timeout=None)
            until = time.monotonic() + max(LINGER_S, LINGER_SHARE * generation_s)
            while pool.in_flight and (left := until - time.monotonic()) > 0:
                answers += pool.take(timeout=left)  # the steps that answer meanwhile join the same generation
            for slot, outcome in answers:
                ep, (turn, reply, reading) = by_slot[slot], waiting.pop(slot)
                t = played[slot]
                row = _row(ep, turn, reply, reading.valid, outcome, t)
                rows.append(row)
                _advance(ep, row, reading.action, outcome, last_turn=t == limit - 1, keep_transcript=keep_transcripts)
                dialect.advance(ep.conv, turn, reply, reading, outcome)
                played[slot] = t + 1
                if not ep.done:
                    ready.append(ep)
                else:
                    _ended(ep, on_episode_end)
            ready.sort(key=lambda ep: ep.index)
            going = [played[ep.index] for ep in episodes if not ep.done]
            edges.trail(min(going) if going and not stopped else max(played.values()))
        edges.trail(max(played.values()))
        edges.finish(stopped)
    except BaseException:
        if not own_pool:
            pool.discard()  # the steps still in flight would answer the next rollout
        raise
    finally:
        if own_pool:
            pool.close()

    batch = StepBatch()
    for row in sorted(rows, key=lambda row: (row["step"], row["episode"])):  # lockstep's order
        batch.append(row)
    _keep_messages(episodes)  # those a stop left unended
    return _with_outcomes(batch, episodes)
