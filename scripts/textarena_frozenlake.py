"""TextArena's FrozenLake as an env=gym factory: a third-party game whose observation is its whole log so far.

TextArena (`pip install textarena`, not an agentrl dependency) writes every move into the observation, about 390
characters a turn after a 789-character opening. scripts/bench_build_memory.py's table measures agentrl's own
environment of that shape; this factory is the real game, for a run such as

    PYTHONPATH=scripts agentrl train env=gym env.factory=textarena_frozenlake:make +debug=fast logger=none

Success is the outright win (TextArena's reward of 1); a fall into a hole pays the share of the way covered.
"""

from __future__ import annotations

import textarena


class FrozenLake:
    action_space = ["[up]", "[down]", "[left]", "[right]"]
    max_turns = 30

    def reset(self, seed: int | None = None):
        self.game = textarena.make("FrozenLake-v0")
        self.game.reset(num_players=1, seed=seed)
        self.turns = 0
        return self.game.get_observation()[1], {}

    def step(self, action: str):
        self.turns += 1
        done, _ = self.game.step(action.strip())
        observation = self.game.get_observation()[1]
        reward = 0.0
        if done:
            rewards, _ = self.game.close()
            reward = float(rewards.get(0, 0.0))
        truncated = not done and self.turns >= self.max_turns
        return observation, reward, done, truncated, {"success": reward >= 1.0}


def make(**kwargs) -> FrozenLake:
    return FrozenLake()
