"""Small Gymnasium-style text environments of the tests' own, for the env=gym route (agentrl/envs/gym_text.py).

`make_corridor` is a well-behaved one: walk right to the door. The others each break one rule, as a user's
environment might."""

from __future__ import annotations

import random


class Corridor:
    """Start at 0 or 1 (by seed), the door at `length`; `left` / `right`. Success: info["is_success"]. Its state is
    the position, which `state_key` gives when `keyed`."""

    def __init__(self, length: int = 3, max_turns: int = 6, keyed: bool = False, listed: bool = True):
        self.length, self.max_turns, self.keyed = length, max_turns, keyed
        if listed:
            self.action_space = ["left", "right"]
        self.pos, self.turns = 0, 0

    def reset(self, seed: int | None = None):
        self.pos, self.turns = (seed or 0) % 2, 0
        return f"Reach the door at {self.length}. You stand at {self.pos}.", self._info()

    def step(self, action: str):
        self.turns += 1
        self.pos += {"right": 1, "left": -1}.get(action.strip(), 0)
        won = self.pos >= self.length
        truncated = not won and self.turns >= self.max_turns
        return (
            f"Turn {self.turns}: you stand at {self.pos}.",
            float(won),
            won,
            truncated,
            {**self._info(), "is_success": won},
        )

    def sample_random_action(self) -> str:
        return random.choice(["left", "right"])

    def expert_plan(self) -> list[str]:
        """The expert's actions from the position just reset: right to the door."""
        return ["right"] * (self.length - self.pos)

    def _info(self) -> dict:
        return {"state_key": self.pos} if self.keyed else {}


def make_corridor(**kwargs) -> Corridor:
    return Corridor(**kwargs)


def make_unlisted(**kwargs) -> Corridor:
    """Lists no actions: the route shows draws of its sample_random_action() instead."""
    return Corridor(listed=False, **kwargs)


class PartialReward(Corridor):
    """No success flag; pays a partial reward at its turn limit (as GEM's Sokoban does) and 1.0 at the door."""

    def step(self, action: str):
        obs, reward, won, truncated, info = super().step(action)
        info.pop("is_success")
        return obs, (0.5 if truncated else reward), won or truncated, truncated, info


def make_partial(**kwargs) -> PartialReward:
    return PartialReward(**kwargs)


class NoSample(Corridor):
    """Neither lists actions nor samples one: no random policy can play it. No expert either."""

    sample_random_action = None
    expert_plan = None

    def __init__(self, **kwargs):
        super().__init__(listed=False, **kwargs)


def make_no_sample(**kwargs) -> NoSample:
    return NoSample(**kwargs)


class NumberObservation(Corridor):
    def reset(self, seed: int | None = None):
        super().reset(seed)
        return [self.pos], {}


def make_number_observation() -> NumberObservation:
    return NumberObservation()


class NanAfterFirst(Corridor):
    """Resets well and pays NaN on each step (a numeric bug in the user's env)."""

    def step(self, action: str):
        obs, _, done, truncated, info = super().step(action)
        return obs, float("nan"), done, truncated, info


def make_nan() -> NanAfterFirst:
    return NanAfterFirst()


class NeedsNetwork(Corridor):
    def reset(self, seed: int | None = None):
        import urllib.error

        raise urllib.error.URLError("[Errno -2] Name or service not known")


def make_needs_network() -> NeedsNetwork:
    return NeedsNetwork()


def make_nothing():
    return object()


NOT_CALLABLE = 3


class GlobalDice:
    """Chance from the process's global RNGs, as GEM's games draw it: reset(seed) seeds python's `random` and
    numpy's global state (GEM's `set_seed`), and each step rolls both into the observation."""

    max_turns = 5

    def __init__(self, listed: bool = True):
        if listed:
            self.action_space = ["roll"]
        random.random()  # a construction that draws too (GEM's games reset in __init__)

    def reset(self, seed: int | None = None):
        import numpy as np

        random.seed(seed)
        np.random.seed(seed)
        return "Roll the dice.", {}

    def step(self, action: str):
        import numpy as np

        return f"{random.randint(1, 6)} and {np.random.randint(1, 7)}", 0.0, False, False, {}

    def sample_random_action(self) -> str:
        random.random()  # draws that must not move the episode's chance
        return "roll"

    def expert_plan(self) -> list[str]:
        random.random()
        return ["roll"]


def make_global_dice(**kwargs) -> GlobalDice:
    return GlobalDice(**kwargs)


class VerboseLog(Corridor):
    """Observations of a known size: `first` characters at the reset, then `per_turn` characters a turn; with
    `whole_log`, the observation is the game's whole log so far, as TextArena's games and chat-style environments
    write it (the prompt grows with the episode), else the turn's own entry. The door is far (`length` 100): random
    play lasts `max_turns`."""

    def __init__(self, first=800, per_turn=400, whole_log=True, max_turns=30, length=100, **kwargs):
        super().__init__(length=length, max_turns=max_turns, **kwargs)
        self.first, self.per_turn, self.whole_log = first, per_turn, whole_log
        self.log: list[str] = []

    def reset(self, seed: int | None = None):
        text, info = super().reset(seed)
        rules = "[GAME] You are on a frozen lake. Walk to the door; each move is announced to both players. "
        self.log = [_padded(rules + text, self.first)]
        return self.log[-1], info

    def step(self, action: str):
        text, reward, won, truncated, info = super().step(action)
        entry = f"[Player 0] [{action.strip()}] [GAME] Player 0 moves {action.strip()}. {text} The lake is quiet."
        self.log.append(_padded(entry, self.per_turn))
        return ("\n".join(self.log) if self.whole_log else self.log[-1]), reward, won, truncated, info


def _padded(text: str, length: int) -> str:
    """`text` repeated and cut to `length` characters: an observation of a known size."""
    return ((text + " ") * (length // (len(text) + 1) + 1))[:length]


def make_verbose(**kwargs) -> VerboseLog:
    return VerboseLog(**kwargs)
