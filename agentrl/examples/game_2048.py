"""A multi-turn tool-calling game in the shape of TRL's examples/scripts/grpo_2048.py: a 4x4 board of 2048, one
`move` tool, python's global `random` for the new tiles (unseeded: agentrl gives each episode its own stream,
seeded from the task), `raise ValueError("Game over.")` when the model moves after the end, and a reward function
that reads the environment's score.

    agentrl train env=tools env.factory=agentrl.examples.game_2048:Game2048 \\
        env.reward_funcs=[agentrl.examples.game_2048:reward_score] env.prompt="Play 2048 with the move tool." \\
        env.expert=agentrl.examples.game_2048:expert env.max_steps=8 env.success_reward=16 \\
        rollout.max_prompt_tokens=1024

Eight turns of boards take about 730 of the tiny model's ids: with the tiny model's 512, a conversation would
reach its budget and end before the game is scored.
"""

from __future__ import annotations

import copy
import random

SIZE = 4
DIRECTIONS = ("left", "up", "right", "down")
# the expert's turns, its final answer included: env.max_steps' default (a task column max_turns sets others)
EXPERT_TURNS = 8


def _slide(row: list[int]) -> tuple[list[int], int]:
    """A row slid to the left, equal neighbours merged once, and the points the merges make."""
    tiles = [t for t in row if t]
    merged, points, i = [], 0, 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            merged.append(tiles[i] * 2)
            points += tiles[i] * 2
            i += 2
        else:
            merged.append(tiles[i])
            i += 1
    return merged + [0] * (len(row) - len(merged)), points


class Game2048:
    """2048 on a 4x4 board; `score` is the sum of the merges, `state_key` the board (GiGPO's anchor)."""

    def __init__(self):
        self.board: list[list[int]] = []
        self.score = 0
        self.done = False

    def reset(self, **kwargs) -> str:
        self.board = [[0] * SIZE for _ in range(SIZE)]
        self.score, self.done = 0, False
        self._add_tile()
        self._add_tile()
        return "\n" + self._render()

    @property
    def state_key(self) -> str:
        return self._render()

    def move(self, direction: str) -> str:
        """Slide every tile of the board one way; equal tiles that meet merge.

        Args:
            direction: One of "up", "down", "left", "right".

        Returns:
            The board after the move and a new tile.
        """
        if self.done:
            raise ValueError("Game over.")
        if direction not in ("up", "down", "left", "right"):
            raise ValueError(f"direction must be up, down, left or right, not {direction!r}")
        board, points = self._moved(direction)
        self.score += points
        if board != self.board:
            self.board = board
            self._add_tile()
        if not self._can_move():
            self.done = True
            return self._render() + "\nGame over."
        return self._render()

    def _moved(self, direction: str) -> tuple[list[list[int]], int]:
        """The board after sliding it one way (before the new tile), and the points its merges make."""
        moved, total = [], 0
        for row in self._rows(direction):
            slid, points = _slide(row)
            total += points
            moved.append(slid)
        return self._from_rows(direction, moved), total

    def _rows(self, direction: str) -> list[list[int]]:
        b = self.board
        if direction == "left":
            return [r[:] for r in b]
        if direction == "right":
            return [r[::-1] for r in b]
        columns = [[b[i][j] for i in range(SIZE)] for j in range(SIZE)]
        return columns if direction == "up" else [c[::-1] for c in columns]

    def _from_rows(self, direction: str, rows: list[list[int]]) -> list[list[int]]:
        if direction == "left":
            return rows
        if direction == "right":
            return [r[::-1] for r in rows]
        columns = rows if direction == "up" else [c[::-1] for c in rows]
        return [[columns[j][i] for j in range(SIZE)] for i in range(SIZE)]

    def _add_tile(self) -> None:
        empty = [(i, j) for i in range(SIZE) for j in range(SIZE) if not self.board[i][j]]
        if empty:
            i, j = random.choice(empty)
            self.board[i][j] = 4 if random.random() < 0.1 else 2

    def _can_move(self) -> bool:
        if any(0 in row for row in self.board):
            return True
        return any(
            self.board[i][j]
            in (self.board[i][j + 1] if j + 1 < SIZE else None, self.board[i + 1][j] if i + 1 < SIZE else None)
            for i in range(SIZE)
            for j in range(SIZE)
        )

    def _render(self) -> str:
        return "\n".join(" ".join(f"{t:4d}" if t else "   ." for t in row) for row in self.board)


def reward_score(environments, **kwargs) -> list[float]:
    """TRL's reward-function signature: each game's score."""
    return [float(env.score) for env in environments]


def expert(env: Game2048, **columns) -> list:
    """Greedy play (agentrl's `env.expert`, for `agentrl sft` and the tiny model's warm-up): each turn the move whose
    merges make the most points, among those that change the board (ties in DIRECTIONS' order), until one turn is
    left of `max_turns`, then the score as the final answer. It plays a copy of the game: agentrl gives the expert
    the episode's own `random` stream and puts it back afterwards, so the same tiles fall when the moves replay."""
    game = copy.deepcopy(env)
    plan: list = []
    for _ in range(int(columns.get("max_turns", EXPERT_TURNS)) - 1):
        moves = [(game._moved(d), d) for d in DIRECTIONS]
        changing = [(points, -i, d) for i, ((board, points), d) in enumerate(moves) if board != game.board]
        if game.done or not changing:
            break
        direction = max(changing)[2]
        game.move(direction)
        plan.append({"name": "move", "arguments": {"direction": direction}})
    return [*plan, f"Score: {game.score}"]
