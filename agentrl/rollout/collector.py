"""Lockstep multi-turn rollouts: B groups of N episodes, one batched policy call per turn.

The rollout is step-wise, as in verl-agent: every agent turn becomes one row
(prompt, completion, ids, outcome, anchor) and history is a bounded window in
the prompt, never a concatenated transcript.

Environments live in a pool (agentrl/envs/workers.py): in-process, or in worker
processes for slow engines. An environment that raises, hangs or dies in reset or
step ends that episode as failed; the fault is counted and the other episodes go on.

This module holds what a policy sees and answers (`Turn`, `Reply`, `Policy`) and the lockstep loop (`collect`);
the rows and episode results it yields, and their metrics, are agentrl/rollout/batch.py's. `turns="ready"` plays
each episode's turns as its environment answers instead (agentrl/rollout/ready_turns.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agentrl.envs.base import Observation, Step, Task, TaskSuite
from agentrl.envs.workers import EnvFault, EnvPool, InlinePool
from agentrl.errors import UserError
from agentrl.rollout.batch import EpisodeResult, Row, StepBatch
from agentrl.rollout.dialects import Dialect, make_dialect
from agentrl.rollout.parsing import ACTION_TAGS

log = logging.getLogger(__name__)


@dataclass
class Turn:
    """What a policy sees for one active episode; `task` and `step` (the turn's number in its episode) are for
    policies that play a plan (the expert of `agentrl sft`), never shown to a model; `episode` and `step` seed a row
    of its own where a policy samples each row from its own stream (rollout/vllm_seeded.py)."""

    prompt: str
    observation: Observation
    task: Task | None = None
    step: int = 0
    episode: int = 0  # the episode's number in its rollout (its pool slot)
    # the reply the environment expects (rollout/parsing.py, REPLY_FORMATS): baselines and experts reply in it
    reply_format: str = ACTION_TAGS
    # the prompt's token ids where the dialect writes them itself (the tool route's conversation: agentrl/rollout/
    # chat_tools.py); None: the policy wraps `prompt` as one user message in the model's chat template
    prompt_ids: list[int] | None = None
    # the conversation so far as chat messages (the tool route), for policies that speak in messages
    messages: list[dict] | None = None


@dataclass
class Reply:
    """A policy's answer; token ids and log-probs when the policy is a language model."""

    text: str
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None


class Policy(Protocol):
    def act(self, turns: list[Turn]) -> list[Reply]: ...


# (whether this rank plays another turn) -> (whether any rank does, whether a stop abandons the rollout)
Lockstep = Callable[[bool], tuple[bool, bool]]

# rollout.turns: every episode's turn t in one generation, or each episode's as its environment answers
TURNS = ("lockstep", "ready")


class RolloutAbandoned(Exception):
    """A stop (a signal) came during the rollout: its rows are dropped, the model has not changed."""


@dataclass
class PromptSpec:
    """How turns are written: the text routes' template and history window; on the tool route (env=tools), the
    tokenizer whose chat template renders the conversation (None: the policy's) and its prompt budget."""

    template: str
    history_length: int
    tokenizer: Any = None
    max_prompt_tokens: int | None = None
    # the text routes: keep only each prompt's last this many characters (prompts.prompt_tail), where only its last
    # ids are read: the tiny model's build, whose demonstrations are tokenised at the rollout's budget. None: whole.
    max_chars: int | None = None


class _Episode:
    """Mutable state of one running episode; its environment is the pool's slot `index`; `conv` is its
    conversation as the dialect keeps it (agentrl/rollout/dialects.py)."""

    def __init__(self, index: int, group: int, task: Task, dialect: Dialect, keep_messages: bool = False):
        self.index, self.group, self.task = index, group, task
        self.dialect, self.keep_messages = dialect, keep_messages
        self.conv = dialect.open(task)
        self.observation: Observation | None = None
        self.result = EpisodeResult(index, group, task.task_id, task.task_type)
        self.done = False


def collect(
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
    turns: str = "lockstep",
    on_episode_end: Callable[[EpisodeResult], None] | None = None,
) -> StepBatch:
    """Roll out `group_size` episodes of each task in lockstep.

    `pool` holds the environments, one slot per episode, and may be reused across
    calls (the trainer keeps one for the whole run); without one, an in-process
    pool is made for this call. `on_turn(turn, limit)` is called after each lockstep
    turn (progress reports). `lockstep` (the trainer's) is asked before each turn and once at the end whether to
    play on and whether a stop abandons the rollout (`RolloutAbandoned`); with several ranks it asks them all.
    `turns="ready"`: each episode's turns as its environment answers (agentrl/rollout/ready_turns.py).
    `on_episode_end(result)` is called with each episode's final result as the episode ends (`agentrl eval` writes
    it out then, so that a killed evaluation keeps the episodes it finished).
    """
    if turns != "lockstep":
        if turns not in TURNS:
            raise ValueError(f"turns must be one of {TURNS}, got {turns!r}")
        from agentrl.rollout.ready_turns import collect_ready  # it imports this module

        return collect_ready(
            suite,
            tasks,
            group_size,
            policy,
            prompt,
            max_steps=max_steps,
            pool=pool,
            keep_transcripts=keep_transcripts,
            on_turn=on_turn,
            lockstep=lockstep,
            on_episode_end=on_episode_end,
        )
    limit = max_steps or suite.max_steps
    dialect = make_dialect(prompt, suite, policy)
    own_pool = pool is None
    if pool is None:
        pool = InlinePool(suite.make_env)
    episodes = _episodes(tasks, group_size, dialect, keep_messages=keep_transcripts)
    try:
        _reset(pool, episodes)
        for ep in episodes:
            if ep.done:  # its reset faulted
                _ended(ep, on_episode_end)
        batch = StepBatch()
        for t in range(limit):
            active = [ep for ep in episodes if not ep.done]
            active, turns = _turns(active, dialect, [t] * len(active), on_episode_end)
            going = _keep_going(policy, bool(active))
            if lockstep is not None:
                going = _agreed(lockstep, going, t)
            if not going:
                break
            replies = policy.act(turns)
            if not active:
                continue  # this rank only took part in the other ranks' collective generation
            readings = [dialect.read(turn, reply) for turn, reply in zip(turns, replies)]
            outcomes = pool.step([(ep.index, reading.action) for ep, reading in zip(active, readings)])
            for ep, turn, reply, reading, outcome in zip(active, turns, replies, readings, outcomes):
                row = _row(ep, turn, reply, reading.valid, outcome, t)
                batch.append(row)
                _advance(ep, row, reading.action, outcome, last_turn=t == limit - 1, keep_transcript=keep_transcripts)
                dialect.advance(ep.conv, turn, reply, reading, outcome)
                if ep.done:
                    _ended(ep, on_episode_end)
            if on_turn is not None:
                on_turn(t + 1, limit)
        if lockstep is not None:
            _agreed(lockstep, False, limit)  # a stop that came during the last turn (a generation cut short)
    finally:
        if own_pool:
            pool.close()
    _keep_messages(episodes)  # those a stop left unended
    return _with_outcomes(batch, episodes)


def _episodes(tasks: Sequence[Task], group_size: int, dialect: Dialect, keep_messages: bool = False) -> list[_Episode]:
    """`group_size` episodes of each task, numbered group by group (an episode's number is its pool slot); with
    `keep_messages`, each keeps its conversation as chat messages where the dialect has one (`_keep_messages`)."""
    return [
        _Episode(g * group_size + k, g, task, dialect, keep_messages)
        for g, task in enumerate(tasks)
        for k in range(group_size)
    ]


def _reset(pool: EnvPool, episodes: list[_Episode]) -> None:
    """Reset every episode's environment in one call; a reset that faults ends its episode."""
    for ep, first in zip(episodes, pool.reset([(ep.index, ep.task) for ep in episodes])):
        if isinstance(first, EnvFault):
            _fault(ep, "reset", first.message)
        else:
            ep.observation = first


def _keep_messages(episodes: list[_Episode]) -> None:
    """Each episode's conversation as chat messages into its result, where it keeps them and its dialect has one
    (the tool route)."""
    for ep in episodes:
        if ep.keep_messages:
            ep.result.messages = ep.dialect.messages(ep.conv)


def _ended(ep: _Episode, on_episode_end: Callable[[EpisodeResult], None] | None) -> None:
    """Hand on an episode's result as it ends, final as `_with_outcomes` makes it (a faulted episode is not won),
    its conversation included (`_keep_messages`)."""
    _keep_messages([ep])
    if on_episode_end is not None:
        on_episode_end(replace(ep.result, won=ep.result.won and ep.result.fault is None))


def _with_outcomes(batch: StepBatch, episodes: list[_Episode]) -> StepBatch:
    """The batch with its episode results and each row's episode outcome (`won`), once every episode is over."""
    for ep in episodes:
        ep.result.won = ep.result.won and ep.result.fault is None
        batch.episodes.append(ep.result)
    won = {ep.index: ep.result.won for ep in episodes}
    batch.won = [won[e] for e in batch.episode]
    return batch


def _agreed(lockstep: Lockstep, going: bool, turn: int) -> bool:
    going, abandon = lockstep(going)
    if abandon:
        raise RolloutAbandoned(f"rollout abandoned at turn {turn}")
    return going


def _keep_going(policy: Policy, local_active: bool) -> bool:
    """Whether to play another turn: while this rank has active episodes, unless the policy decides.

    A policy whose generation is collective across ranks (vLLM through TRL gathers every rank's
    prompts) has a `keep_going` that asks all ranks, so that a rank whose episodes are done still
    calls `act([])` on each turn until every rank is done; otherwise the other ranks would hang.
    """
    keep_going = getattr(policy, "keep_going", None)
    return local_active if keep_going is None else bool(keep_going(local_active))


def reply_format_of(suite: TaskSuite) -> str:
    """The reply format the suite's environments expect: its optional ``reply_format``, else agentrl's tags."""
    return getattr(suite, "reply_format", None) or ACTION_TAGS


def _turns(
    episodes: list[_Episode],
    dialect: Dialect,
    steps: Sequence[int],
    on_episode_end: Callable[[EpisodeResult], None] | None = None,
) -> tuple[list[_Episode], list[Turn]]:
    """The episodes that play their next turn (each at its step) and their turns. An episode whose dialect has no
    room for another turn (a conversation at its token budget) ends here, counted as truncated."""
    playing, turns = [], []
    for ep, t in zip(episodes, steps):
        turn = dialect.turn(ep.conv, ep.observation, t, ep.task, ep.index)
        if turn is None:
            ep.result.counts["truncated"] = 1
            ep.done = True
            _ended(ep, on_episode_end)
            continue
        playing.append(ep)
        turns.append(turn)
    return playing, turns


def _row(ep: _Episode, turn: Turn, reply: Reply, valid: bool, outcome: Step | EnvFault, t: int) -> Row:
    """The batch row of an episode's turn; a faulted step earns nothing and its action counts as not accepted."""
    stepped = not isinstance(outcome, EnvFault)
    return {
        "group": ep.group,
        "episode": ep.index,
        "step": t,
        "agent": turn.observation.agent,
        "task_id": ep.task.task_id,
        "reward": float(outcome.reward) if stepped else 0.0,
        "valid": valid,
        "admissible": bool(outcome.action_valid) if stepped else False,
        "anchor": _hashable_anchor(turn.observation, ep.task),
        "observation": turn.observation.text,
        "prompt": turn.prompt,
        "completion": reply.text,
        "prompt_ids": reply.prompt_ids,
        "completion_ids": reply.completion_ids,
        "logprobs": reply.logprobs,
        "won": False,  # the episode's outcome, filled in once every episode is over
        "replayed": False,
    }


def _hashable_anchor(observation: Observation, task: Task) -> Hashable:
    """The observation's anchor key, which step groups hash (every estimator logs them): an environment that
    gives an unhashable one breaks the contract, and is told so in one line rather than by a traceback."""
    anchor = observation.anchor()
    try:
        hash(anchor)
    except TypeError:
        raise UserError(
            f"the environment of {task.task_id} gave an Observation.anchor_key of type {type(anchor).__name__}, "
            "which cannot be hashed: give a str, int or tuple (docs/environments.md, 'The contract')"
        ) from None
    return anchor


def _advance(
    ep: _Episode, row: Row, action: str, outcome: Step | EnvFault, *, last_turn: bool, keep_transcript: bool
) -> None:
    """Move the episode on after its turn (`row`): its totals, transcript and history, the next observation."""
    if isinstance(outcome, EnvFault):
        _fault(ep, "step", outcome.message)
        done, next_obs = True, None
    else:
        ep.result.won = ep.result.won or bool(outcome.won)
        done, next_obs = bool(outcome.done), outcome.observation
        for name, count in (next_obs.counts or {}).items():
            ep.result.counts[name] = ep.result.counts.get(name, 0) + int(count)
    ep.result.ret += row["reward"]
    ep.result.length += 1
    ep.result.invalid += int(not row["valid"])
    agent = row["agent"]
    ep.result.agent_turns[agent] = ep.result.agent_turns.get(agent, 0) + 1
    ep.result.agent_invalid[agent] = ep.result.agent_invalid.get(agent, 0) + int(not row["valid"])
    if keep_transcript:
        ep.result.transcript.append(
            {
                "observation": row["observation"],
                "reply": row["completion"],
                "agent": agent,
                "action": action,
                "valid": row["valid"],
                "reward": row["reward"],
            }
        )
    if next_obs is not None:
        ep.observation = next_obs
    ep.done = ep.done or done or last_turn


def _fault(ep: _Episode, where: str, message: str) -> None:
    """End the episode as failed (the pool has already replaced the environment)."""
    log.warning("environment fault in %s of %s: %s", where, ep.task.task_id, message)
    ep.result.fault = f"{where}: {message}"
    ep.done = True
