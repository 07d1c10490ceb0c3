"""The environment contract every adapter implements.

An agent environment is text in, text out: ``reset(task)`` gives the first
observation, ``step(action)`` takes the raw action string the model produced.
Adapters never see tokens, and the collector never sees an engine's internals.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Task:
    """One environment instance: every rollout of it starts from the same state."""

    task_id: str
    task_type: str
    seed: int = 0
    payload: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Observation:
    """What the agent sees at one turn."""

    text: str
    admissible_actions: list[str]
    task_description: str
    # Identity of the true state for GiGPO step grouping; adapters without a
    # state key fall back to the observation text, as the reference does.
    anchor_key: Hashable | None = None
    # What the prompt shows in place of the admissible list, when that list is too long to print
    # (ScienceWorld: the action templates and the objects in view). None: the list itself.
    actions_text: str | None = None
    # Which agent of a team acts on this observation (a role such as "checker" or "solver"). Each
    # observation is one turn, one model call: two agents acting within one environment step take two
    # turns, and the environment's step() for the first one returns the second one's observation. Rows
    # carry it (Dr. MAS's agent-wise advantages, algo.norm_scope=agent); a single agent leaves it "0".
    agent: str = "0"
    # The chat messages this observation adds to a conversation (the tool-calling route, env=tools: the task's
    # opening messages, then each turn's tool results); None on the text routes, whose prompts are built anew.
    messages: list[dict] | None = None
    # Counts the step adds to its episode's metrics, by name (env=tools: "tool_calls", "tool_errors/<kind>").
    counts: dict[str, int] | None = None

    def anchor(self) -> Hashable:
        return self.anchor_key if self.anchor_key is not None else self.text


@dataclass
class Step:
    """The result of one action."""

    observation: Observation
    reward: float
    done: bool
    won: bool
    action_valid: bool  # whether the environment accepted the action as admissible


@runtime_checkable
class AgentEnv(Protocol):
    """A multi-turn text environment."""

    def reset(self, task: Task) -> Observation: ...

    def step(self, action: str) -> Step: ...

    def close(self) -> None: ...


@runtime_checkable
class TaskSuite(Protocol):
    """A task source plus an environment factory: what `env=<name>` builds.

    ``task(split, index)`` is deterministic, so that a sampler position is all a
    checkpoint needs to continue the same task stream.

    Optional, and so not a member of the Protocol (a suite without it still is one):
    ``expert_plan(task) -> list[str]``, an expert's actions that win ``task`` when played in
    order from its start state. ``agentrl sft`` plays them through the same prompts and
    history as RL and clones them (docs/environments.md, "Experts"); ``has_expert`` tells whether a suite has one.
    """

    name: str
    splits: tuple[str, ...]
    eval_split: str
    task_types: tuple[str, ...]
    max_steps: int

    def task(self, split: str, index: int) -> Task: ...

    def split_size(self, split: str) -> int | None: ...  # None: unbounded (procedural)

    def make_env(self) -> AgentEnv: ...


EXPERT_PLAN = "expert_plan"


def within_split(suite: TaskSuite, split: str, index: int) -> int:
    """A task index folded into the split's size (unbounded splits take any index): callers that pick their own
    indices (the tiny model's build and check, `agentrl sft`) never ask a split for a task it does not have."""
    size = suite.split_size(split)
    return index if size is None else index % size


def has_expert(suite: TaskSuite) -> bool:
    """Whether the suite offers an expert (`expert_plan`, docs/environments.md)."""
    return callable(getattr(suite, EXPERT_PLAN, None))


def contract_problem(result: object, op: str) -> str | None:
    """What is wrong with what an environment's `reset` (an Observation) or `step` (a Step) returned, in one line;
    None when it keeps the contract. The worker pools turn a problem into a fault of that episode, naming it."""
    if op == "step":
        if not isinstance(result, Step):
            return f"step returned {type(result).__name__}, not agentrl.envs.base.Step"
        for name in ("done", "won", "action_valid"):
            flag = getattr(result, name)
            if isinstance(flag, (str, bytes)) or flag not in (True, False):  # numpy's bools are fine
                return f"Step.{name} is {type(flag).__name__}, not bool"
        if isinstance(result.reward, bool) or not isinstance(result.reward, numbers.Real):  # numpy's floats too
            return f"Step.reward is {type(result.reward).__name__}, not a number"
        if not math.isfinite(result.reward):
            return f"Step.reward is {result.reward}, not a finite number"
        result = result.observation
    if not isinstance(result, Observation):
        return f"{op} returned {type(result).__name__} as its observation, not agentrl.envs.base.Observation"
    for name in ("text", "task_description", "agent"):
        if not isinstance(getattr(result, name), str):
            return f"Observation.{name} is {type(getattr(result, name)).__name__}, not str"
    if result.actions_text is not None and not isinstance(result.actions_text, str):
        return f"Observation.actions_text is {type(result.actions_text).__name__}, not str or None"
    actions = result.admissible_actions
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        return "Observation.admissible_actions is not a list of str"
    return None
