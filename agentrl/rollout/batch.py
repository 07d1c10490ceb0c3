"""What a rollout yields: one row per agent turn (`StepBatch`), one result per episode (`EpisodeResult`), and
the metrics read from them (`summarize`, `agent_breakdown`).

The collector (agentrl/rollout/collector.py) appends a row for every turn it plays and an `EpisodeResult` for
every episode; training reads the rows' columns (docs/architecture.md, "One iteration"), and training and
held-out evaluation log `summarize`'s success, return, length, invalid rate and pass@k.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

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
    # what the environment counted (Observation.counts: tool calls, tool errors by kind), and "truncated": an
    # episode ended because its conversation reached its token budget (env=tools)
    counts: dict[str, int] = field(default_factory=dict)
    # the conversation as chat messages, where the dialect keeps one (env=tools) and transcripts are kept
    messages: list[dict] | None = None


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
            for name in sorted({name for e in eps for name in e.counts}):  # none on the text routes
                metrics[f"{key}{name}"] = float(sum(e.counts.get(name, 0) for e in eps))
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
