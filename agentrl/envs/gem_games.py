"""env=gem: GEM's environments (the `gem-llm` package) on agentrl's Gymnasium-style route (envs/gym_text.py).

`agentrl train env=gem env.id=game:Sokoban-v0-easy` makes each environment with ``gem.make(id, **env.kwargs)``.
What GEM does that the route is told here (docs/environments.md, "GEM"):

- Replies are GEM's own format, ``\\boxed{X}``: the prompt asks for it and the environment receives it whole.
- The board of a game is in ``info["suffix"]``, shown after the observation, and is the GiGPO anchor where it
  is one (a suffix of several lines); the games with no board are anchored on the observation text.
- Success is a terminating step, not truncated, whose observation is GEM's announcement of a win: every game
  of GEM's says "Congratulations! ..." then and only then. GEM's rewards are progress rewards (Mastermind pays
  for each new black peg, Game2048 for each milestone tile, Minesweeper for each cell revealed, Sokoban a
  partial reward at its turn limit), so no reward threshold reads a win.
- A reply GEM cannot parse ends its episode (GEM's rule, kept).
- Three games have an expert for `agentrl sft` (`EXPERTS`): GuessTheNumber binary search, whose guesses for the
  hidden number are a fixed plan; Game2048 the greedy move (the most empty cells after it), played on a copy of
  the game in the same RNG state; Sokoban a breadth-first search for the shortest winning moves; GEM's other
  games have none.
- Ids that cannot run offline are refused in one line: the word games that fetch NLTK's corpus at reset, and
  the families that load a data set from the Hugging Face hub. Ids with no random action (Sudoku,
  TowerofHanoi, the reasoning-gym tasks) train a pretrained model; the random baseline and the tiny model's
  warm-up cannot play them.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np

from agentrl.envs.gym_text import GymSettings, checked_suite
from agentrl.errors import UserError

# How every GEM game's observation opens on the step that wins it (and on no other step).
WIN_ANNOUNCEMENT = "Congratulations!"
# What cannot run on a machine that reaches no network, by GEM id prefix (checked before anything is made).
OFFLINE_REFUSALS = {
    "game:Wordle-": "it fetches NLTK's words corpus from the network at reset",
    "game:Hangman-": "it fetches NLTK's words corpus from the network at reset",
    "game:WordSearch-": "it fetches NLTK's words corpus from the network at reset",
    "math:": "it loads its data set from the Hugging Face hub",
    "code:": "it loads its data set from the Hugging Face hub",
    "qa:": "it loads its data set from the Hugging Face hub",
    "logic:": "it loads its data set from the Hugging Face hub",
    "eval:": "it loads its data set from the Hugging Face hub",
}
# Ids whose reset fails in gem-llm 0.1.0 itself (found by the probe every build runs; listed for `agentrl envs`).
BROKEN = {
    "game:FifteenPuzzle-v0-random": "its reset raises TypeError in gem-llm 0.1.0",
    "game:Crosswords-v0-random": "its reset raises ValueError (no words match) in gem-llm 0.1.0",
}
NO_RANDOM_ACTION = ("game:Sudoku-", "game:TowerofHanoi-", "rg:")


def binary_search_plan(game) -> list[str]:
    """The guesses binary search makes for GuessTheNumber's hidden number (GEM's `game_number` in
    `[min_number, max_number]`): the middle of what the answers so far leave, until it is the number. It needs
    ceil(log2(n + 1)) guesses at most for n numbers: 4 for easy's 1-10, within its 4 turns."""
    low, high, target, plan = game.min_number, game.max_number, game.game_number, []
    while True:
        guess = (low + high) // 2
        plan.append(str(guess))
        if guess == target:
            return plan
        low, high = (guess + 1, high) if target > guess else (low, guess - 1)


# Game2048's moves in the order that breaks the greedy expert's ties: down, then left, keep the big tiles in the
# bottom-left corner (on 200 held-out seeds of easy, 0.755 won against 0.71 for up-down-left-right).
GREEDY_2048_ORDER = ("down", "left", "right", "up")


def empty_cells(board: list[list[int]]) -> int:
    return sum(cell == 0 for row in board for cell in row)


def boards_that_moved(game) -> dict[str, list[list[int]]]:
    """Each move that changes Game2048's board, in `GREEDY_2048_ORDER`, with the board its slide leaves (its tiles
    merged, before the new tile)."""
    slides = {"up": game._move_up, "down": game._move_down, "left": game._move_left, "right": game._move_right}
    boards = {move: slides[move]() for move in GREEDY_2048_ORDER}
    return {move: board for move, board in boards.items() if board != game.board}


def greedy_2048_move(game) -> str | None:
    """The move that leaves the most empty cells once its tiles have merged (before the new tile), ties broken in
    `GREEDY_2048_ORDER`; None where no move changes the board."""
    best, most = None, -1
    for move, board in boards_that_moved(game).items():
        if empty_cells(board) > most:
            best, most = move, empty_cells(board)
    return best


def greedy_2048_plan(game) -> list[str]:
    """Game2048's greedy expert: `greedy_2048_move` at each turn, played on a deep copy of the game just reset, in
    the RNG state the real game will draw its new tiles from (GEM's global `random`: the environment's own on the
    route, envs/gym_text.py), so the real game replays it tile for tile. It stops at the win, at a board with no
    move, or at the turn limit (a plan that does not win: agentrl sft drops its episode)."""
    saved = random.getstate(), np.random.get_state()
    try:
        sim, plan = copy.deepcopy(game), []
        while len(plan) < sim.max_turns:
            move = greedy_2048_move(sim)
            if move is None:
                break
            plan.append(move)
            _, _, terminated, truncated, _ = sim.step(f"\\boxed{{{move}}}")
            if terminated or truncated:
                break
        return plan
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])


# Sokoban's moves as GEM's `CHANGE_COORDINATES` gives them (row, column), in the order its action_space lists them.
SOKOBAN_MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def sokoban_step(walls, boxes: frozenset, player: tuple, move: str) -> tuple[tuple, frozenset] | None:
    """The (player, boxes) a move leads to under GEM's rules (`SokobanEnv._push`): a step onto floor or a target
    moves; a step into a box pushes it where the cell beyond is neither wall nor box; None where the move changes
    nothing (a wasted turn). ``walls`` holds every cell off the room (GEM's rooms have a wall border)."""
    dr, dc = SOKOBAN_MOVES[move]
    cell = (player[0] + dr, player[1] + dc)
    if cell in walls:
        return None
    if cell not in boxes:
        return cell, boxes
    beyond = (cell[0] + dr, cell[1] + dc)
    if beyond in walls or beyond in boxes:
        return None
    return cell, boxes - {cell} | {beyond}


def sokoban_state(game) -> tuple[set, frozenset, frozenset, tuple]:
    """GEM's Sokoban room as (walls, targets, boxes, player): cells as (row, column)."""
    fixed, state = game.room_fixed, game.room_state
    walls = {(int(r), int(c)) for r, c in zip(*np.nonzero(fixed == 0))}
    targets = frozenset((int(r), int(c)) for r, c in zip(*np.nonzero(fixed == 2)))
    boxes = frozenset((int(r), int(c)) for r, c in zip(*np.nonzero((state == 3) | (state == 4))))
    return walls, targets, boxes, tuple(int(x) for x in game.player_position)


def sokoban_plan(game) -> list[str]:
    """Sokoban's expert: a breadth-first search over (player, boxes) from the room just reset, under GEM's rules
    (`SokobanEnv._push`: a step onto floor or a target moves; a step into a box pushes it where the cell beyond is
    floor or a target; any other step is a wasted turn, which the search never takes), to the first state with every
    box on a target: a shortest winning plan. It searches at most `max_turns` moves deep and returns [] where no plan
    wins within them (a plan that does not win: agentrl sft drops its episode)."""
    walls, targets, boxes, player = sokoban_state(game)
    start = (player, boxes)
    parent: dict = {start: None}
    frontier = [start]
    for _ in range(game.max_turns - game.turn_count):
        following = []
        for player, boxes in frontier:
            for move in SOKOBAN_MOVES:
                nxt = sokoban_step(walls, boxes, player, move)
                if nxt is None or nxt in parent:
                    continue
                parent[nxt] = ((player, boxes), move)
                if nxt[1] <= targets:
                    plan = []
                    while parent[nxt] is not None:
                        nxt, move = parent[nxt]
                        plan.append(move)
                    return plan[::-1]
                following.append(nxt)
        frontier = following
    return []


# The experts agentrl knows for GEM's games, by id prefix: the actions that win the episode just reset, read from
# the game's hidden state (as household's expert sees inside closed containers) or played on a copy of it.
EXPERTS = {
    "game:GuessTheNumber-": binary_search_plan,
    "game:Game2048-": greedy_2048_plan,
    "game:Sokoban-": sokoban_plan,
}


class Log2Board:
    """Game2048 with its board shown as one digit a cell: the tile's log2 (0 for an empty cell; a, b for 1024 and
    2048), separated by single spaces. GEM's own board pads each cell to four characters, which the tiny model's
    tokenizer cuts into runs of spaces and digits of varying length, so that one cell's neighbours are a varying
    number of tokens away; here each cell is one token and the cell below is always eight tokens on. Everything
    else is GEM's game (the object it wraps)."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name: str):
        return getattr(self._env, name)

    def reset(self, seed: int | None = None):
        obs, info = self._env.reset(seed=seed)
        return obs, self._shown(info)

    def step(self, action: str):
        *result, info = self._env.step(action)
        return (*result, self._shown(info))

    def _shown(self, info: dict) -> dict:
        board = getattr(self._env, "unwrapped", self._env).board
        rows = "\n".join(" ".join(format(cell.bit_length() - 1, "x") if cell else "0" for cell in row) for row in board)
        return {**info, "suffix": f"Current board (log2 of each tile, 0 where empty):\n{rows}\nEnter your move."}


class WordBoard(Log2Board):
    """Game2048 with its board shown as words: each row (top to bottom), then each column (left to right), as one
    word of a letter a cell (a: empty, b: 2, c: 4, ... the tile's log2 from a). Each line of tiles is one word,
    which the tiny model's tokenizer keeps in a few tokens, so that what a line allows (a slide, a merge) can be
    read from the line's own tokens; a move along the rows or the columns changes the board where one of their
    words allows it."""

    def _shown(self, info: dict) -> dict:
        board = getattr(self._env, "unwrapped", self._env).board
        letter = [[chr(ord("a") + (cell.bit_length() - 1 if cell else 0)) for cell in row] for row in board]
        rows = " ".join("".join(row) for row in letter)
        columns = " ".join("".join(column) for column in zip(*letter))
        return {**info, "suffix": f"Rows: {rows}\nColumns: {columns}\nEnter your move."}


class WordBoardMoves(WordBoard):
    """`WordBoard`, with the moves that change the board as the state's action list (``info["admissible_actions"]``,
    in `GREEDY_2048_ORDER`), as `SokobanWords` lists Sokoban's: random play, and a tiny model warmed up on it, pick
    a move from a list that changes with the board, and a move that leaves the board as it is is an invalid action.
    Where no move changes the board (the game is lost), the list has all four."""

    def _shown(self, info: dict) -> dict:
        moving = list(boards_that_moved(getattr(self._env, "unwrapped", self._env)))
        return {**super()._shown(info), "admissible_actions": moving or list(GREEDY_2048_ORDER)}


# Sokoban's cells as SokobanWords shows them, by GEM's room_state code (5, the player, is "q" on a target).
SOKOBAN_LETTERS = {0: "w", 1: "f", 2: "t", 3: "y", 4: "x", 5: "p"}
# What SokobanWords shows for GEM's instructions (about 200 tokens of the tiny model's, in every prompt): one line.
SOKOBAN_RULES = (
    "Sokoban: push every box onto a target within {turns} turns; a move into a box pushes it. Reply \\boxed{{move}}."
)


class SokobanWords(Log2Board):
    """Sokoban with its room shown as words, a letter a cell (w wall, f floor, t target, x box, y box on a target,
    p the player, q the player on a target, which GEM's grid shows as P): each row of the room inside its border
    (always wall in GEM's generator), then each column, as one word; then, for each move, the cells from the
    player to the first wall that way, for each move that changes the room (``Each way: up xtw, left fw``: up, a
    box, then a target, then a wall: pushing up puts the box on the target), each after the move's name as the
    action list spells it. Those moves are also the state's action list (``info["admissible_actions"]``), so that
    the random play a tiny model is warmed up on copies a move from a list that changes with the room (as on
    household), and a move that wastes the turn (into a wall, or a box that cannot move) is an invalid action. GEM's
    instructions (a legend of its grid, and an example move it draws at random at each reset) are one line
    (`SOKOBAN_RULES`): the prompt is a third as long, so that the board is a larger share of what the tiny model's
    attention spreads over. Everything else is GEM's game."""

    def reset(self, seed: int | None = None):
        _, info = super().reset(seed=seed)
        return SOKOBAN_RULES.format(turns=getattr(self._env, "unwrapped", self._env).max_turns), info

    def _shown(self, info: dict) -> dict:
        game = getattr(self._env, "unwrapped", self._env)
        walls, _, boxes, player = sokoban_state(game)
        legal = [move for move in SOKOBAN_MOVES if sokoban_step(walls, boxes, player, move) is not None]
        cells = [[SOKOBAN_LETTERS[int(v)] for v in row] for row in game.room_state]
        row, column = (int(x) for x in game.player_position)
        if game.room_fixed[row, column] == 2:
            cells[row][column] = "q"
        inner = [line[1:-1] for line in cells[1:-1]]
        rows = " ".join("".join(line) for line in inner)
        columns = " ".join("".join(line) for line in zip(*inner))
        rays = []
        for move in legal:
            (dr, dc), ray = SOKOBAN_MOVES[move], ""
            r, c = row + dr, column + dc
            while 0 <= r < len(cells) and 0 <= c < len(cells[0]):
                ray += cells[r][c]
                if cells[r][c] == "w":
                    break
                r, c = r + dr, c + dc
            rays.append(f"{move} {ray}")
        shown = f"Rows: {rows}\nColumns: {columns}\nEach way: {', '.join(rays)}\nEnter your move."
        return {**info, "suffix": shown, "admissible_actions": legal or list(SOKOBAN_MOVES)}


# agentrl's own kwargs of make_gem (not GEM's): how a game's board is shown, by name, then by the games' id prefix.
BOARDS = {
    "log2": {"game:Game2048-": Log2Board},
    "words": {"game:Game2048-": WordBoard, "game:Sokoban-": SokobanWords},
    "words_moves": {"game:Game2048-": WordBoardMoves},
}


def make_gem(env_id: str, board: str | None = None, **kwargs: Any):
    """The factory the route calls in every process that holds an environment: ``gem.make(env_id, **kwargs)``, with
    its expert (`EXPERTS`) as the route's `expert_plan()` where the game has one. ``board`` (agentrl's, from
    ``env.kwargs``; not passed to GEM): ``log2`` shows Game2048's board one digit a cell (`Log2Board`), ``words``
    Game2048's rows and columns as words (`WordBoard`) or Sokoban's room as words and what lies each way from the
    player (`SokobanWords`), ``words_moves`` Game2048's words and the moves that change its board as the action list
    (`WordBoardMoves`)."""
    import gem

    env = gem.make(env_id, **kwargs)
    if board is not None:
        wrapper = next((w for prefix, w in BOARDS.get(board, {}).items() if env_id.startswith(prefix)), None)
        if wrapper is None:
            shown = ", ".join(f"{name} ({' '.join(p + '*' for p in games)})" for name, games in BOARDS.items())
            raise ValueError(f"board={board!r} is not a board of {env_id}; the boards: {shown}")
        env = wrapper(env)
    expert = next((plan for prefix, plan in EXPERTS.items() if env_id.startswith(prefix)), None)
    if expert is not None:
        env.expert_plan = lambda: expert(getattr(env, "unwrapped", env))
    return env


def registered_ids() -> list[str]:
    """Every id GEM registers (empty where gem-llm is not installed)."""
    try:
        from gem.envs.registration import ENV_REGISTRY
    except ImportError:
        return []
    return list(ENV_REGISTRY)


def unknown_id_line(env_id: str, known: list[str]) -> str:
    """The one line for an id GEM does not register: the closest ids (difflib), else GEM's families, and the
    command that lists the ids."""
    import difflib

    families = sorted({i.split(":", 1)[0] for i in known})
    family = env_id.split(":", 1)[0] if ":" in env_id else None
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    if close:
        choices = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
        hint = f"did you mean {choices}?"
    else:
        hint = f"GEM's families: {' '.join(f + ':' for f in families)}"
    listing = (
        f"agentrl envs --gem {family} lists every {family}: id" if family in families else "agentrl envs lists them"
    )
    return f"env.id={env_id!r} is not a GEM id; {hint} ({listing})"


def refusal(env_id: str) -> str | None:
    """Why an id cannot run here, in a few words, or None."""
    for prefix, why in OFFLINE_REFUSALS.items():
        if env_id.startswith(prefix):
            return why
    return BROKEN.get(env_id)


def id_status(env_id: str) -> str:
    """One phrase for `agentrl envs`: usable, usable with a pretrained model only, or why not."""
    why = refusal(env_id)
    if why is not None:
        return f"no: {why}"
    if env_id.startswith(NO_RANDOM_ACTION):
        return "yes, with a pretrained model= (no random action: no --random, no model=tiny)"
    return "yes"


def build(env_cfg: Any):
    """The suite for `env=gem env.id=ID`."""
    from agentrl.run_folder import as_container

    env_id = str(env_cfg.id)
    known = registered_ids()
    if env_id not in known:
        raise UserError(unknown_id_line(env_id, known))
    why = refusal(env_id)
    if why is not None:
        raise UserError(f"env.id={env_id} cannot run here: {why} (agentrl envs lists the ids that can)")
    kwargs = dict(as_container(env_cfg.kwargs) or {})
    settings = GymSettings(
        factory="agentrl.envs.gem_games:make_gem",
        kwargs={"env_id": env_id, **kwargs},
        reply_format="boxed",
        success_text=WIN_ANNOUNCEMENT,
        reward=env_cfg.reward,
        random_candidates=int(env_cfg.random_candidates),
        anchor="board",
    )
    ood = as_container(env_cfg.ood_kwargs)
    return checked_suite(
        "gem",
        env_id,
        settings,
        env_cfg,
        ood_kwargs={"env_id": env_id, **dict(ood)} if ood is not None else None,
        # reasoning-gym's tasks are one question, one answer: GEM states no turn limit for them
        max_steps=env_cfg.max_steps or (1 if env_id.startswith("rg:") else None),
        what=f"env.id={env_id}",
    )
