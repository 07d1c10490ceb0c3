"""ARPO replay (arXiv 2505.16282): a per-task buffer of successful episodes.

The rule (docs/algorithms.md, "ARPO replay"), applied by ``ReplayBuffer.apply``
once per iteration, before the advantages, as the reference's ``apply_replay``
(``verl/trainer/ray_trainer.py``) does:
- an episode's score is its return divided by the environment's best return;
- first each group whose scores have population std below ``fail_std`` [0.05]
  and mean below ``fail_mean`` [0.2] (an all-fail group) gets one stored
  success of its task, drawn uniformly, in place of the group's first episode
  (lowest episode id), so the group size stays N;
- then every episode of the iteration's original batch (before injection)
  whose score is above ``success_threshold`` [0.1] is appended to its task's
  FIFO list of ``capacity`` [8]; failures and replayed copies never are. An
  episode that an injection replaced is still stored, and the draws see only
  earlier iterations' successes.

The reference's ``enable_replay`` flag is never read; here the trainer builds a
buffer only when ``algo.replay.enabled`` is true. The buffer and its random
generator are plain JSON (``state_dict``), so they go into checkpoints.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class StepBatch(Protocol):
    """What the buffer needs of a batch of step rows (agentrl's rollout `StepBatch` is one).

    Declared here so that `algos/` imports nothing from the rest of agentrl."""

    ROW_COLUMNS: tuple[str, ...]
    group: list[int]
    episode: list[int]
    step: list[int]
    task_id: list[str]
    reward: list[float]
    replayed: list[bool]

    def __len__(self) -> int: ...
    def rows(self, indices: Sequence[int]) -> dict[str, list]: ...
    def with_rows(self, rows: dict[str, list]) -> Any: ...


@dataclass(frozen=True)
class ReplayRule:
    max_return: float = 10.0
    success_threshold: float = 0.1
    fail_std: float = 0.05
    fail_mean: float = 0.2


def episode_scores(batch: StepBatch, max_return: float) -> dict[int, float]:
    """Return / max_return of every episode in the batch, by episode id."""
    totals: dict[int, float] = defaultdict(float)
    for episode, reward in zip(batch.episode, batch.reward):
        totals[episode] += reward
    return {e: r / max_return for e, r in totals.items()}


def all_fail_groups(batch: StepBatch, rule: ReplayRule) -> list[int]:
    """Groups whose episode scores have population std < fail_std and mean < fail_mean, in id order."""
    scores = episode_scores(batch, rule.max_return)
    by_group: dict[int, dict[int, float]] = defaultdict(dict)
    for group, episode in zip(batch.group, batch.episode):
        by_group[group][episode] = scores[episode]
    failing = []
    for group in sorted(by_group):
        values = np.fromiter(by_group[group].values(), dtype=np.float64)
        if values.std(ddof=0) < rule.fail_std and values.mean() < rule.fail_mean:
            failing.append(group)
    return failing


def _episode_rows(batch: StepBatch) -> dict[int, list[int]]:
    """Row indices of each episode, in step order."""
    rows: dict[int, list[int]] = defaultdict(list)
    for i in sorted(range(len(batch)), key=lambda i: (batch.episode[i], batch.step[i])):
        rows[batch.episode[i]].append(i)
    return rows


class ReplayBuffer:
    """One FIFO list of successful episodes per task id."""

    def __init__(self, capacity: int = 8, rule: ReplayRule | None = None, seed: int = 0):
        if capacity < 1:
            raise ValueError(f"algo.replay.capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.rule = rule or ReplayRule()
        self.rng = np.random.default_rng(seed)
        self.store: dict[str, deque] = {}
        self.last_injected = 0
        self.last_added = 0

    def __len__(self) -> int:
        return sum(len(q) for q in self.store.values())

    def inject(self, batch: StepBatch) -> StepBatch:
        """The batch with one stored success in place of the first episode of each all-fail group that has one."""
        self.last_injected = 0
        episode_rows = _episode_rows(batch)
        first_of_group: dict[int, int] = {}
        for group, episode in zip(batch.group, batch.episode):
            first_of_group[group] = min(episode, first_of_group.get(group, episode))
        task_of_group = dict(zip(batch.group, batch.task_id))
        replace: dict[int, dict[str, list]] = {}  # episode id -> stored rows
        for group in all_fail_groups(batch, self.rule):
            stored = self.store.get(task_of_group[group])
            if not stored:
                continue
            rows = stored[int(self.rng.integers(len(stored)))]
            episode = first_of_group[group]
            n = len(rows["step"])
            replace[episode] = {**rows, "group": [group] * n, "episode": [episode] * n, "replayed": [True] * n}
        if not replace:
            return batch
        self.last_injected = len(replace)
        keep = [i for e, idx in episode_rows.items() if e not in replace for i in idx]
        columns = batch.rows(sorted(keep))
        for rows in replace.values():
            for name in batch.ROW_COLUMNS:
                columns[name].extend(rows[name])
        return batch.with_rows(columns)

    def apply(self, batch: StepBatch) -> StepBatch:
        """One iteration's replay: ``inject``, then ``add`` this iteration's successes from the original batch.

        The reference's order (``apply_replay``): the draws come from the buffer as it was before this
        iteration, and the episodes an injection replaced are stored like any other.
        """
        out = self.inject(batch)
        self.add(batch)
        return out

    def add(self, batch: StepBatch) -> int:
        """Store this iteration's successful episodes (never replayed copies); returns how many."""
        scores = episode_scores(batch, self.rule.max_return)
        added = 0
        for episode, idx in _episode_rows(batch).items():
            if batch.replayed[idx[0]] or scores[episode] <= self.rule.success_threshold:
                continue
            queue = self.store.setdefault(batch.task_id[idx[0]], deque(maxlen=self.capacity))
            queue.append(batch.rows(idx))
            added += 1
        self.last_added = added
        return added

    def metrics(self) -> dict[str, float]:
        tasks = len(self.store)
        return {
            "replay/groups_injected": float(self.last_injected),
            "replay/episodes_added": float(self.last_added),
            "replay/buffer_episodes": float(len(self)),
            "replay/buffer_tasks": float(tasks),
            "replay/buffer_fill": len(self) / (tasks * self.capacity) if tasks else 0.0,
        }

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "rng": self.rng.bit_generator.state,
            "store": {task: list(queue) for task, queue in self.store.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"the checkpoint's replay buffer has capacity {state['capacity']}, "
                f"but algo.replay.capacity={self.capacity}"
            )
        self.rng.bit_generator.state = state["rng"]
        self.store = {
            task: deque((_restored_rows(rows) for rows in episodes), maxlen=self.capacity)
            for task, episodes in state["store"].items()
        }


def _restored_rows(rows: dict[str, list]) -> dict[str, list]:
    """Stored rows as the batch holds them.

    JSON turns tuple anchor keys into lists; step grouping needs them hashable again. Rows stored before
    rows named their agent are the one agent's, "0" (``Observation.agent``'s default)."""
    agent = rows.get("agent", ["0"] * len(rows["step"]))
    return {**rows, "agent": agent, "anchor": [tuple(a) if isinstance(a, list) else a for a in rows["anchor"]]}
