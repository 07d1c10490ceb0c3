"""env=alfworld: ALFWorld's TextWorld engine behind the AgentEnv protocol.

One `AlfworldEnv` plays one game at a time through TextWorld's own gym registry
with alfworld's wrappers (`engine.make_textworld_env`; the demangler makes object
names read as in the benchmark, `apple 1`). Reward is 10 on success, as in verl-agent; an episode ends
on a win or after `max_steps` steps (50 in the reference). The anchor key is the
observation text, as in the reference GiGPO code.

The suite serves the published splits when `$ALFWORLD_DATA/json_2.1.1` holds the
download, and otherwise a pool of games that agentrl generates from the wheel's
own data (synthetic scenes, not the ALFRED floor plans) and caches.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from agentrl.envs.base import Observation, Step, Task

log = logging.getLogger(__name__)

WIN_REWARD = 10.0
_BANNER = re.compile(r"^-= Welcome to TextWorld, ALFRED! =-\s*", re.MULTILINE)
_TASK_MARK = "Your task is to: "


def split_first_observation(text: str) -> tuple[str, str]:
    """(room description, task) from ALFWorld's first observation."""
    body = _BANNER.sub("", text).strip()
    if _TASK_MARK in body:
        room, task = body.split(_TASK_MARK, 1)
        return room.strip(), task.strip()
    return body, ""


class AlfworldEnv:
    """One ALFWorld game at a time (the AgentEnv protocol)."""

    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        self._env = None
        self._task_text = ""
        self._admissible: list[str] = []
        self._steps = 0
        self._done = True

    def reset(self, task: Task) -> Observation:
        from agentrl.envs.alfworld.data import preserve_argv
        from agentrl.envs.alfworld.engine import make_textworld_env

        self.close()
        with preserve_argv():  # Fast Downward overwrites sys.argv on every load and reset
            self._env = make_textworld_env([task.payload["gamefile"]], max_episode_steps=self.max_steps)
            obs, infos = self._env.reset()
        room, self._task_text = split_first_observation(obs[0])
        self._steps, self._done = 0, False
        return self._observe(room, infos)

    def step(self, action: str) -> Step:
        from agentrl.envs.alfworld.data import preserve_argv

        if self._env is None or self._done:
            raise RuntimeError("step() needs a reset() first")
        valid = action in self._admissible
        with preserve_argv():
            obs, _, dones, infos = self._env.step([action])
        self._steps += 1
        won = bool(infos["won"][0])
        self._done = won or bool(dones[0]) or self._steps >= self.max_steps
        return Step(self._observe(obs[0].strip(), infos), WIN_REWARD if won else 0.0, self._done, won, valid)

    def _observe(self, text: str, infos: dict) -> Observation:
        # `help` is always admissible and never useful; verl-agent drops it too.
        self._admissible = [a for a in infos["admissible_commands"][0] if a != "help"]
        return Observation(text=text, admissible_actions=list(self._admissible), task_description=self._task_text)

    def close(self) -> None:
        if self._env is not None:
            try:
                self._env.close()
            finally:
                self._env = None


class AlfworldSuite:
    """The games of each split, real or generated; `task(split, i)` is the i-th game of the split."""

    name = "alfworld"
    eval_split = "eval_in_distribution"

    def __init__(self, root: Path, max_steps: int, synthetic: bool):
        from agentrl.envs.alfworld.data import SHORT_TYPES, SPLITS, find_games

        self.root, self.max_steps, self.synthetic = root, max_steps, synthetic
        self.splits = tuple(SPLITS)
        self._games = {split: find_games(root, split) for split in self.splits}
        self.task_types = tuple(SHORT_TYPES.values())

    def split_size(self, split: str) -> int:
        self._check(split)
        return len(self._games[split])

    def task(self, split: str, index: int) -> Task:
        from agentrl.envs.alfworld.data import task_type_of

        self._check(split)
        games = self._games[split]
        game = games[index % len(games)]
        return Task(
            task_id=str(game.parent.relative_to(self.root)),
            task_type=task_type_of(game),
            payload={"gamefile": str(game)},
        )

    def make_env(self) -> AlfworldEnv:
        return AlfworldEnv(self.max_steps)

    def expert_plan(self, task: Task) -> list[str]:
        """The expert `agentrl sft` imitates: the planner's winning commands. A generated game stores the ones its
        generator verified (`walkthrough`); any other game is solved here by following the same planner."""
        from agentrl.envs.alfworld.engine import solve

        gamefile = Path(task.payload["gamefile"])
        try:
            stored = json.loads(gamefile.read_text()).get("walkthrough")
        except (OSError, ValueError, AttributeError):
            stored = None
        if stored:
            return [str(command) for command in stored]
        return solve(gamefile) or []  # [] where the planner finds no way: the episode is not won, and dropped

    def _check(self, split: str) -> None:
        if split not in self._games:
            raise ValueError(f"unknown alfworld split {split!r}; valid splits: {', '.join(self.splits)}")


def build(env_cfg) -> AlfworldSuite:
    """The suite for `env=alfworld`: real data when present, else the generated pool (built on first use)."""
    from agentrl.envs.alfworld.data import real_data_root
    from agentrl.errors import UserError

    max_steps = env_cfg.max_steps or 50
    if env_cfg.data_dir:
        root, synthetic = Path(env_cfg.data_dir).expanduser(), False
    elif (real := real_data_root()) is not None:
        root, synthetic = real, False
    else:
        root, synthetic = _ensure_generated(env_cfg), True
    try:
        return AlfworldSuite(root, max_steps, synthetic)
    except ValueError as err:
        raise UserError(f"env=alfworld: {err}") from None


def _generated_root(env_cfg) -> Path:
    from agentrl.cache import cache_root

    name = f"generated-seed{env_cfg.generation_seed}-per{env_cfg.generated_per_type}"
    return cache_root(None) / "alfworld" / name


def _ensure_generated(env_cfg) -> Path:
    """Generate (once) and cache the synthetic pool; say once that these are not the ALFRED floor plans."""
    from agentrl.cache import make_cache_folder
    from agentrl.envs.alfworld.generate import generate_split_pool, generation_workers

    root = _generated_root(env_cfg)
    make_cache_folder(root.parent)
    marker = root / "COMPLETE"
    if not marker.is_file():
        log.warning(
            "no ALFWorld download found ($ALFWORLD_DATA/json_2.1.1); generating a pool of synthetic games "
            "in %s. These are synthetic scenes, not the ALFRED floor plans: results are not comparable "
            "with published ALFWorld scores.",
            root,
        )
        generate_split_pool(
            root, env_cfg.generated_per_type, env_cfg.generation_seed, progress=True, workers=generation_workers()
        )
        marker.write_text("")
    else:
        log.info("env=alfworld on synthetic games from %s (not the ALFRED floor plans)", root)
    return root
