"""Lockstep multi-turn rollouts: B groups of N episodes, one batched policy call per turn.

The rollout is step-wise, as in verl-agent: every agent turn becomes one row
(prompt, completion, ids, outcome, anchor) and history is a bounded window in
the prompt, never a concatenated transcript.

Environments live in a pool (agentrl/envs/workers.py): in-process, or in worker
processes for slow engines. An environment that raises, hangs or dies in reset or
step ends that episode as failed; the fault is counted and the other episodes go on.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol

import numpy as np

from agentrl.envs.base import Observation, Step, Task, TaskSuite
from agentrl.envs.workers import EnvFault, EnvPool, InlinePool
from agentrl.errors import UserError
from agentrl.rollout.parsing import ParsedAction, env_action, parse_action
from agentrl.rollout.prompts import HistoryWindow, build_prompt

log = logging.getLogger(__name__)


@dataclass
class Turn:
    """What a policy sees for one active episode; `task` and `step` (the turn's number in its episode) are for
    policies that play a plan (the expert of `agentrl sft`), never shown to a model."""

    prompt: str
    observation: Observation
    task: Task | None = None
    step: int = 0


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


class RolloutAbandoned(Exception):
    """A stop (a signal) came during the rollout: its rows are dropped, the model has not changed."""


@dataclass
class PromptSpec:
    template: str
    history_length: int


Row = dict[str, Any]  # one agent turn: a value for each of StepBatch.ROW_COLUMNS, by name


@dataclass
class StepBatch:
    """One row per agent turn, as parallel lists (see docs/architecture.md, "One iteration").

    Every field but `episodes` is a row column (`ROW_COLUMNS`, derived from the fields below the class)."""

    group: list[int] = field(default_factory=list)
    episode: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    agent: list[str] = field(default_factory=list)  # which agent of a team took the turn (Observation.agent)
    task_id: list[str] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)  # an action could be parsed from the reply
    admissible: list[bool] = field(default_factory=list)  # the environment accepted the action
    anchor: list[Hashable] = field(default_factory=list)  # the true-state key where the env has one, else the text
    observation: list[str] = field(default_factory=list)  # the observation text of the turn
    prompt: list[str] = field(default_factory=list)
    completion: list[str] = field(default_factory=list)
    prompt_ids: list[list[int] | None] = field(default_factory=list)
    completion_ids: list[list[int] | None] = field(default_factory=list)
    logprobs: list[list[float] | None] = field(default_factory=list)
    won: list[bool] = field(default_factory=list)  # the row's episode succeeded (filled at the end)
    replayed: list[bool] = field(default_factory=list)  # the row comes from a replay buffer, not this rollout
    episodes: list[EpisodeResult] = field(default_factory=list)  # this rollout's episodes (never replayed ones)

    ROW_COLUMNS: ClassVar[tuple[str, ...]]  # set below the class, from its fields

    def __len__(self) -> int:
        return len(self.group)

    def rows(self, indices: Sequence[int]) -> dict[str, list]:
        """The row columns of the given rows."""
        return {name: [getattr(self, name)[i] for i in indices] for name in self.ROW_COLUMNS}

    def with_rows(self, rows: dict[str, list]) -> StepBatch:
        """A batch holding exactly these rows, and this batch's episode results."""
        return StepBatch(**{name: list(rows[name]) for name in self.ROW_COLUMNS}, episodes=list(self.episodes))

    def append(self, row: Row) -> None:
        """Add one row; it must hold exactly the row columns."""
        if row.keys() != set(self.ROW_COLUMNS):
            raise ValueError(f"a row holds one value for each of {self.ROW_COLUMNS}; got {tuple(row)}")
        for name in self.ROW_COLUMNS:
            getattr(self, name).append(row[name])

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns the advantage estimators take: the numeric ones, and the agents' labels."""
        return {
            "group": np.asarray(self.group, dtype=np.int64),
            "episode": np.asarray(self.episode, dtype=np.int64),
            "step": np.asarray(self.step, dtype=np.int64),
            "reward": np.asarray(self.reward, dtype=np.float64),
            "valid": np.asarray(self.valid, dtype=bool),
            "agent": np.asarray(self.agent, dtype=str),
        }


StepBatch.ROW_COLUMNS = tuple(f.name for f in fields(StepBatch) if f.name != "episodes")


@dataclass
class EpisodeResult:
    episode: int
    group: int
    task_id: str
    task_type: str
    won: bool = False
    ret: float = 0.0
    length: int = 0
    invalid: int = 0
    fault: str | None = None  # the environment's error, if it broke
    transcript: list[dict] = field(default_factory=list)
    agent_turns: dict[str, int] = field(default_factory=dict)  # turns per agent (Observation.agent; "0" alone)
    agent_invalid: dict[str, int] = field(default_factory=dict)  # of those, the replies that parsed to no action


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
) -> StepBatch:
    """Roll out `group_size` episodes of each task in lockstep.

    `pool` holds the environments, one slot per episode, and may be reused across
    calls (the trainer keeps one for the whole run); without one, an in-process
    pool is made for this call. `on_turn(turn, limit)` is called after each lockstep
    turn (progress reports). `lockstep` (the trainer's) is asked before each turn and once at the end whether to
    play on and whether a stop abandons the rollout (`RolloutAbandoned`); with several ranks it asks them all.
    """
    limit = max_steps or suite.max_steps
    own_pool = pool is None
    if pool is None:
        pool = InlinePool(suite.make_env)
    episodes = [
        _Episode(g * group_size + k, g, task, prompt.history_length)
        for g, task in enumerate(tasks)
        for k in range(group_size)
    ]
    try:
        for ep, first in zip(episodes, pool.reset([(ep.index, ep.task) for ep in episodes])):
            if isinstance(first, EnvFault):
                _fault(ep, "reset", first.message)
            else:
                ep.observation = first

        batch = StepBatch()
        for t in range(limit):
            active = [ep for ep in episodes if not ep.done]
            going = _keep_going(policy, bool(active))
            if lockstep is not None:
                going = _agreed(lockstep, going, t)
            if not going:
                break
            turns = [_turn(ep, prompt, t) for ep in active]
            replies = policy.act(turns)
            if not active:
                continue  # this rank only took part in the other ranks' collective generation
            parsed = [parse_action(reply.text) for reply in replies]
            actions = [env_action(reply.text, p) for reply, p in zip(replies, parsed)]
            outcomes = pool.step([(ep.index, action) for ep, action in zip(active, actions)])
            for ep, turn, reply, p, action, outcome in zip(active, turns, replies, parsed, actions, outcomes):
                row = _row(ep, turn, reply, p, outcome, t)
                batch.append(row)
                _advance(ep, row, action, outcome, last_turn=t == limit - 1, keep_transcript=keep_transcripts)
            if on_turn is not None:
                on_turn(t + 1, limit)
        if lockstep is not None:
            _agreed(lockstep, False, limit)  # a stop that came during the last turn (a generation cut short)
    finally:
        if own_pool:
            pool.close()

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


def _turn(ep: _Episode, prompt: PromptSpec, t: int) -> Turn:
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
    )
    return Turn(prompt=text, observation=obs, task=ep.task, step=t)


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


def summarize(batch: StepBatch, prefix: str) -> dict[str, float]:
    """Success, return, length, invalid rate and pass@k, overall and per task type; for a team, per agent too
    (`agent_breakdown`)."""
    episodes = batch.episodes
    if not episodes:
        return {}
    metrics: dict[str, float] = {}
    per_type: dict[str, list] = defaultdict(list)
    for e in episodes:
        per_type[e.task_type].append(e)
    for name, eps in [("", episodes)] + sorted(per_type.items()):
        key = f"{prefix}/" if not name else f"{prefix}/{name}/"
        metrics[f"{key}success"] = float(np.mean([e.won for e in eps]))
        if not name:
            metrics[f"{key}return"] = float(np.mean([e.ret for e in eps]))
            metrics[f"{key}episode_length"] = float(np.mean([e.length for e in eps]))
            steps = sum(e.length for e in eps)
            metrics[f"{key}invalid_rate"] = float(sum(e.invalid for e in eps) / max(steps, 1))
            metrics[f"{key}faults"] = float(sum(e.fault is not None for e in eps))
    by_task: dict[str, list[bool]] = defaultdict(list)
    for e in episodes:
        by_task[e.task_id].append(e.won)
    k = min(len(v) for v in by_task.values())
    if k > 1:
        metrics[f"{prefix}/pass@{k}"] = float(np.mean([any(v) for v in by_task.values()]))
    return metrics | agent_breakdown(episodes, prefix)


def agent_breakdown(episodes: list[EpisodeResult], prefix: str) -> dict[str, float]:
    """Per agent of a team (nothing where only the default agent "0" acted), `<prefix>/agent/<agent>/...`:

    - success: the share of the episodes the agent took a turn in that were won;
    - invalid_rate: the agent's replies that parsed to no action, over its turns;
    - turn_share: the agent's turns over all turns.
    """
    agents = sorted({a for e in episodes for a in e.agent_turns})
    if agents in ([], ["0"]):
        return {}
    total = sum(sum(e.agent_turns.values()) for e in episodes)
    metrics = {}
    for agent in agents:
        acted = [e for e in episodes if e.agent_turns.get(agent)]
        turns = sum(e.agent_turns[agent] for e in acted)
        key = f"{prefix}/agent/{agent}/"
        metrics[f"{key}success"] = float(np.mean([e.won for e in acted]))
        metrics[f"{key}invalid_rate"] = float(sum(e.agent_invalid.get(agent, 0) for e in acted) / turns)
        metrics[f"{key}turn_share"] = float(turns / total)
    return metrics
