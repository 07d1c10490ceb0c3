"""Tool-calling environments of the tests' own, in TRL's environment_factory shape (agentrl/envs/tools_env.py).

`Counter` is a well-behaved one; the others each break one rule, as a user's class might."""

from __future__ import annotations

import random
import time


class Counter:
    """Reach the target by adding: `add` is a tool, `reset(**columns)` and `get_reward()` are TRL's contract."""

    def __init__(self):
        self.total, self.target = 0, 0

    def reset(self, seed: int = 0, **kwargs) -> str:
        self.total, self.target = 0, 2 + seed % 3
        self.noise = random.random()  # python's global random, unseeded, as TRL's 2048 example draws
        return f" Reach {self.target}."

    def add(self, amount: int) -> str:
        """Add to the running total.

        Args:
            amount: How much to add.
        """
        self.total += amount
        return str(self.total)

    def explode(self, reason: str) -> str:
        """A tool that always raises.

        Args:
            reason: Why.
        """
        raise ValueError(f"boom: {reason}")

    def wait(self, seconds: float) -> str:
        """A tool that sleeps.

        Args:
            seconds: How long.
        """
        time.sleep(seconds)
        return "woke"

    def get_reward(self) -> float:
        return 1.0 if self.total == self.target else 0.0


def shout(text: str) -> str:
    """A plain tool function, TRL's tools=.

    Args:
        text: What to shout.
    """
    return text.upper()


def expert(env: Counter, **columns) -> list:
    return [{"name": "add", "arguments": {"amount": env.target}}, "done"]


def length_reward(prompts, completions, environments, **kwargs) -> list[float]:
    return [0.0 for _ in completions]


def wrong_reward(prompts, answers) -> list[float]:
    return [0.0]


class NoReset:
    def add(self, amount: int) -> str:
        """Add.

        Args:
            amount: How much.
        """
        return str(amount)

    def get_reward(self) -> float:
        return 0.0


class Undocumented:
    def reset(self, **kwargs):
        return None

    def add(self, amount):
        return str(amount)

    def get_reward(self) -> float:
        return 0.0


class Crasher(Counter):
    """`Counter` whose `crash` tool kills its process where the target is 2 (the task's seed picks it)."""

    def crash(self) -> str:
        """Crash the process where the target is 2.

        Returns:
            "fine" elsewhere.
        """
        if self.target == 2:
            import os

            os._exit(3)
        return "fine"


class Riddle:
    """No tools at all, a plain question as TRL trains one without tools: the reward reads the reply (`said_yes`)."""

    def reset(self, **kwargs) -> str:
        return " Say yes."


def said_yes(prompts, completions, environments, **kwargs) -> list[float]:
    return [float(c[-1]["content"].strip() == "yes") for c in completions]
