"""``env=household_team``: the household world played by a team of three agents (issue 28; Dr. MAS).

Each step of the household world takes two turns:

1. the ``checker`` answers ``continue`` or ``finish``; its turn does not step the household world;
2. on ``continue`` the ``actor`` takes one admissible action, which steps the world;
   on ``finish`` the ``finisher`` must give the goal-completing action: the world steps, and an action
   that does not complete the goal ends the episode as failed.

A checker reply that is neither answer is invalid and leaves the turn with the checker ("Nothing happens.");
it costs a turn. The household world's own rules stand: an actor action that completes the goal wins too.
Once the team is trained, finisher rows sit in successful episodes and actor rows in long failures, which is
the gap between agents' reward statistics (mu_k - mu) that Dr. MAS's agent-wise normalisation addresses
(``algo.norm_scope=agent``, docs/algorithms.md).

One model plays every role; the role is the first line of the observation text, so it is in the prompt.
(One model per role would triple the model memory and the weight updates for a task this small, and agentrl
trains one model; docs/environments.md, "Teams".) Every turn counts toward ``max_steps``, which is twice the
household level's limit by default: the world gets as many steps as it has alone.
"""

from __future__ import annotations

from dataclasses import replace

from agentrl.envs.base import Observation, Step, Task
from agentrl.envs.household import HouseholdEnv, HouseholdSuite

CHECKER, ACTOR, FINISHER = "checker", "actor", "finisher"
CHECKER_ACTIONS = ("continue", "finish")
ROLE_TEXT = {
    CHECKER: "You are the checker. Answer finish if the next action can complete the task, else continue.",
    ACTOR: "You are the actor. Take the next action towards the task.",
    FINISHER: "You are the finisher. Give the one action that completes the task; any other fails it.",
}


class HouseholdTeamEnv:
    """One household episode played by checker, actor and finisher (the ``AgentEnv`` protocol)."""

    def __init__(self, world: HouseholdEnv, max_turns: int):
        if max_turns < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_turns}")
        self.world, self.max_turns = world, max_turns
        self.current: Observation | None = None  # the world's latest observation
        self.role = CHECKER
        self.turns = 0

    def reset(self, task: Task) -> Observation:
        self.current, self.turns = self.world.reset(task), 0
        return self._observe(CHECKER, self.current.text)

    def step(self, action: str) -> Step:
        if self.current is None:
            raise RuntimeError("step() called before reset()")
        self.turns += 1
        if self.role == CHECKER:
            step = self._check(action.strip() if isinstance(action, str) else "")
        else:
            step = self._act(action)
        if self.turns >= self.max_turns and not step.done:
            step = replace(step, done=True)
        return step

    def close(self) -> None:
        self.world.close()

    def _check(self, answer: str) -> Step:
        """The checker's turn: the world does not step."""
        if answer not in CHECKER_ACTIONS:
            return Step(self._observe(CHECKER, "Nothing happens."), 0.0, False, False, False)
        role = FINISHER if answer == "finish" else ACTOR
        return Step(self._observe(role, self.current.text), 0.0, False, False, True)

    def _act(self, action: str) -> Step:
        """The actor's or the finisher's turn: one step of the world; a finisher that does not win fails."""
        finishing = self.role == FINISHER
        world_step = self.world.step(action)
        self.current = world_step.observation
        failed = finishing and not world_step.won
        text = "That did not complete the task. The episode ends." if failed else world_step.observation.text
        done = world_step.done or failed
        return Step(self._observe(CHECKER, text), world_step.reward, done, world_step.won, world_step.action_valid)

    def _observe(self, role: str, text: str) -> Observation:
        self.role = role
        actions = list(CHECKER_ACTIONS) if role == CHECKER else self.current.admissible_actions
        return replace(self.current, text=f"{ROLE_TEXT[role]}\n{text}", admissible_actions=actions, agent=role)


class HouseholdTeamSuite:
    """The household suite's tasks, played by the team."""

    name = "household_team"
    splits = HouseholdSuite.splits
    eval_split = HouseholdSuite.eval_split

    def __init__(self, level: str = "default", max_steps: int | None = None):
        self.household = HouseholdSuite(level)
        self.level, self.task_types = level, self.household.task_types
        self.world_steps = self.household.max_steps
        self.max_steps = 2 * self.world_steps if max_steps is None else max_steps  # two turns per world step

    def task(self, split: str, index: int) -> Task:
        return self.household.task(split, index)

    def split_size(self, split: str) -> int | None:
        return self.household.split_size(split)

    def make_env(self) -> HouseholdTeamEnv:
        return HouseholdTeamEnv(HouseholdEnv(self.world_steps), self.max_steps)

    def expert_plan(self, task: Task) -> list[str]:
        """The household solver's plan played by the team, one reply a turn: before each action the checker
        answers continue, and finish before the last; the actor takes the actions, the finisher the last."""
        plan = self.household.expert_plan(task)
        turns: list[str] = []
        for i, action in enumerate(plan):
            turns += ["finish" if i == len(plan) - 1 else "continue", action]
        return turns
