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
from typing import Protocol

from agentrl.envs.base import Observation, Step, Task, TaskSuite
from agentrl.envs.workers import EnvFault, EnvPool, InlinePool
from agentrl.errors import UserError
from agentrl.rollout.batch import EpisodeResult, Row, StepBatch
from agentrl.rollout.parsing import ACTION_TAGS, ParsedAction, action_for_env, parse_reply
from agentrl.rollout.prompts import HistoryWindow, build_prompt

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
    template: str
    history_length: int


class _Episode:
    """Mutable state of one running episode; its environment is the pool's slot `index`."""

    def __init__(self, index: int, group: int, task: Task, history_length: int):
        self.index, self.group, self.task = index, group, task
        self.history = HistoryWindow(history_length)
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
    reply_format = reply_format_of(suite)
    own_pool = pool is None
    if pool is None:
        pool = InlinePool(suite.make_env)
    episodes = _episodes(tasks, group_size, prompt.history_length)
    try:
        _reset(pool, episodes)
        for ep in episodes:
            if ep.done:  # its reset faulted
                _ended(ep, on_episode_end)
        batch = StepBatch()
        for t in range(limit):
            active = [ep for ep in episodes if not ep.done]
            going = _keep_going(policy, bool(active))
            if lockstep is not None:
                going = _agreed(lockstep, going, t)
            if not going:
                break
            turns = [_turn(ep, prompt, t, reply_format) for ep in active]
            replies = policy.act(turns)
            if not active:
                continue  # this rank only took part in the other ranks' collective generation
            parsed = [parse_reply(reply.text, reply_format) for reply in replies]
            actions = [action_for_env(reply.text, p, reply_format) for reply, p in zip(replies, parsed)]
            outcomes = pool.step([(ep.index, action) for ep, action in zip(active, actions)])
            for ep, turn, reply, p, action, outcome in zip(active, turns, replies, parsed, actions, outcomes):
                row = _row(ep, turn, reply, p, outcome, t)
                batch.append(row)
                _advance(ep, row, action, outcome, last_turn=t == limit - 1, keep_transcript=keep_transcripts)
                if ep.done:
                    _ended(ep, on_episode_end)
            if on_turn is not None:
                on_turn(t + 1, limit)
        if lockstep is not None:
            _agreed(lockstep, False, limit)  # a stop that came during the last turn (a generation cut short)
    finally:
        if own_pool:
            pool.close()
    return _with_outcomes(batch, episodes)


def _episodes(tasks: Sequence[Task], group_size: int, history_length: int) -> list[_Episode]:
    """`group_size` episodes of each task, numbered group by group (an episode's number is its pool slot)."""
    return [
        _Episode(g * group_size + k, g, task, history_length) for g, task in enumerate(tasks) for k in range(group_size)
    ]


def _reset(pool: EnvPool, episodes: list[_Episode]) -> None:
    """Reset every episode's environment in one call; a reset that faults ends its episode."""
    for ep, first in zip(episodes, pool.reset([(ep.index, ep.task) for ep in episodes])):
        if isinstance(first, EnvFault):
            _fault(ep, "reset", first.message)
        else:
            ep.observation = first


def _ended(ep: _Episode, on_episode_end: Callable[[EpisodeResult], None] | None) -> None:
    """Hand on an episode's result as it ends, final as `_with_outcomes` makes it (a faulted episode is not won)."""
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


def _turn(ep: _Episode, prompt: PromptSpec, t: int, reply_format: str) -> Turn:
    obs = ep.observation
    text = build_prompt(
        prompt.template,
        task=obs.task_description,
        observation=obs.text,
        admissible=obs.admissible_actions,
        history=ep.history.pairs,
        step=t,
        history_length=prompt.history_length,
        actions_text=obs.actions_text,
        reply_format=reply_format,
    )
    return Turn(prompt=text, observation=obs, task=ep.task, step=t, episode=ep.index, reply_format=reply_format)


def _row(ep: _Episode, turn: Turn, reply: Reply, parsed: ParsedAction, outcome: Step | EnvFault, t: int) -> Row:
    """The batch row of an episode's turn; a faulted step earns nothing and its action counts as not accepted."""
    stepped = not isinstance(outcome, EnvFault)
    return {
        "group": ep.group,
        "episode": ep.index,
        "step": t,
        "agent": turn.observation.agent,
        "task_id": ep.task.task_id,
        "reward": float(outcome.reward) if stepped else 0.0,
        "valid": parsed.valid,
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
    ep.history.add(row["observation"], action)
    if next_obs is not None:
        ep.observation = next_obs
    ep.done = ep.done or done or last_turn


def _fault(ep: _Episode, where: str, message: str) -> None:
    """End the episode as failed (the pool has already replaced the environment)."""
    log.warning("environment fault in %s of %s: %s", where, ep.task.task_id, message)
    ep.result.fault = f"{where}: {message}"
    ep.done = True
