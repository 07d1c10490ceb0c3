"""An environment's own global RNG state (env=gym and env=gem; agentrl/envs/gym_text.py).

GEM seeds python's `random` and numpy's global state at reset and draws its games' chance from them; `OwnRandomState`
gives each environment object its own copy of both, swapped in around each call into it, so that episodes played
in lockstep in one process do not share one stream and the trainer's own RNG is left as it was.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


class OwnRandomState:
    """One environment's python `random` and numpy global RNG state, swapped in for the calls into it
    (`active()`); the caller's states are put back after, as they were."""

    def __init__(self, seed: int = 0):
        self.seed(seed)

    def seed(self, seed: int) -> None:
        self._py = random.Random(seed).getstate()
        self._np = np.random.RandomState(int(seed) % 2**32).get_state()

    @contextmanager
    def active(self, keep: bool = True) -> Iterator[None]:
        """Within: the environment's states. `keep=False`: what is drawn within leaves them as they were."""
        caller_py, caller_np = random.getstate(), np.random.get_state()
        random.setstate(self._py)
        np.random.set_state(self._np)
        try:
            yield
        finally:
            if keep:
                self._py, self._np = random.getstate(), np.random.get_state()
            random.setstate(caller_py)
            np.random.set_state(caller_np)
