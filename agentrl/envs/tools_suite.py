"""env=tools' tasks and checks (the route itself: agentrl/envs/tools_env.py): rows of a dataset, or seeds with one
prompt, split into disjoint training and held-out tasks; the suite is checked at build on one environment made and
reset here, so that a broken factory, tool or reward function is one line before anything is built."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

from agentrl.envs.base import Task
from agentrl.envs.gym_factory import load_factory, one_line
from agentrl.envs.tools_env import SPLITS, ToolEnv, ToolSettings, check_reward_func
from agentrl.errors import UserError

log = logging.getLogger(__name__)


class ToolSuite:
    """The tasks of env=tools (the module docstring) and the environments that play them."""

    reply_format = "tools"

    def __init__(self, name: str, label: str, settings: ToolSettings, rows: dict[str, list[dict]], schemas, expert):
        self.name, self.settings, self.rows = name, settings, rows
        self.splits, self.eval_split = SPLITS, "eval_in_distribution"
        self.task_types = (label,)
        self.max_steps = settings.max_steps
        self.tool_schemas = schemas
        self.expert = expert
        if expert is not None:  # only then: has_expert(suite) reads the attribute's presence
            self.expert_plan = self._expert_plan
        self.random_policy_problem = (
            "env=tools has no list of actions for a random policy to play: use a model, or the environment's expert "
            "(env.expert)"
        )

    def split_size(self, split: str) -> int:
        self._check(split)
        return len(self.rows[split])

    def task(self, split: str, index: int) -> Task:
        self._check(split)
        rows = self.rows[split]
        position = index % len(rows)
        row = rows[position]
        return Task(task_id=f"{split}/{row['id']}", task_type=self.task_types[0], seed=int(row["seed"]), payload=row)

    def make_env(self) -> ToolEnv:
        return ToolEnv(self.settings)

    def _expert_plan(self, task: Task) -> list[str]:
        env = self.make_env()
        try:
            env.reset(task)
            return env.expert_plan(self.expert)
        finally:
            env.close()

    def _check(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(f"unknown {self.name} split {split!r}; valid splits: {', '.join(self.splits)}")


class _SeedRows:
    """Seeds as rows, made when asked (a million training seeds take no memory)."""

    def __init__(self, prompt: Any, first: int, count: int):
        self.prompt, self.first, self.count = prompt, first, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, position: int) -> dict:
        seed = self.first + position
        return {"id": seed, "seed": seed, "prompt": self.prompt, "columns": {"seed": seed}}


def read_rows(path: str) -> list[dict]:
    """The rows of a JSONL file or of a `datasets` folder saved to disk; UserError in one line otherwise."""
    where = Path(path).expanduser()
    if where.is_dir():
        from datasets import load_from_disk

        try:
            return [dict(row) for row in load_from_disk(str(where))]
        except Exception as err:
            raise UserError(f"env.dataset={path}: not a datasets folder saved to disk ({one_line(err)})") from None
    if not where.is_file():
        raise UserError(f"env.dataset={path}: no such file or folder")
    rows = []
    for number, line in enumerate(where.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as err:
                raise UserError(f"env.dataset={path}: line {number} is not JSON ({err})") from None
    return rows


def _task_rows(raw: list[dict], path: str, prompt: Any, first_id: int = 0) -> list[dict]:
    """Dataset rows as task payloads: the prompt, the columns for reset, a seed for the episode's RNG."""
    tasks = []
    for i, row in enumerate(raw):
        if not isinstance(row, dict) or ("prompt" not in row and prompt is None):
            raise UserError(f"env.dataset={path}: row {i + 1} has no 'prompt' column (or set env.prompt)")
        columns = {k: v for k, v in row.items() if k != "prompt"}
        tasks.append(
            {"id": first_id + i, "seed": first_id + i, "prompt": row.get("prompt", prompt), "columns": columns}
        )
    return tasks


def build(env_cfg: Any) -> ToolSuite:
    """The suite for `env=tools env.factory=MODULE:CALLABLE` (and/or env.tools), checked: a factory that does not
    import, an instance without reset, a tool that cannot be described, a reward function with the wrong signature
    or no reward at all are one line here, before anything is built."""

    factory = env_cfg.factory
    tools = tuple(_plain(env_cfg.tools) or ())
    reward_funcs = tuple(_plain(env_cfg.reward_funcs) or ())
    if not factory and not tools:
        raise UserError("env=tools needs env.factory=MODULE:CALLABLE (TRL's environment_factory) or env.tools=[...]")
    settings = ToolSettings(
        factory=factory,
        tools=tools,
        reward_funcs=reward_funcs,
        max_steps=int(env_cfg.max_steps or 8),
        success_reward=float(env_cfg.success_reward),
        tool_timeout_s=float(env_cfg.tool_timeout_s),
    )
    prompt = _plain(env_cfg.prompt)
    if env_cfg.dataset is not None:
        rows = _task_rows(read_rows(env_cfg.dataset), env_cfg.dataset, prompt)
        if env_cfg.eval_dataset is not None:
            held_out = _task_rows(read_rows(env_cfg.eval_dataset), env_cfg.eval_dataset, prompt, first_id=len(rows))
        else:
            order = list(range(len(rows)))
            random.Random(0).shuffle(order)  # a fixed shuffle: the same held-out rows in every run
            n = int(env_cfg.eval_rows)
            if n >= len(rows):
                raise UserError(f"env.eval_rows={n} leaves no training rows of the {len(rows)} in env.dataset")
            held_out = [rows[i] for i in sorted(order[:n])]
            rows = [rows[i] for i in sorted(order[n:])]
        splits: dict[str, Any] = {"train": rows, "eval_in_distribution": held_out}
    elif prompt is not None:
        base, train = int(env_cfg.seed_base), int(env_cfg.train_seeds)
        splits = {
            "train": _SeedRows(prompt, base, train),
            "eval_in_distribution": _SeedRows(prompt, base + train, int(env_cfg.eval_seeds)),
        }
    else:
        raise UserError("env=tools needs its tasks: env.dataset=PATH (JSONL or a datasets folder) or env.prompt='...'")
    if not len(splits["eval_in_distribution"]):
        raise UserError("env=tools has no held-out tasks: give env.eval_dataset or env.eval_rows >= 1")
    expert = load_factory(env_cfg.expert) if env_cfg.expert else None
    schemas = _checked(settings, splits["train"][0], env_cfg)
    label = (factory or tools[0]).rpartition(":")[2]
    return ToolSuite("tools", label, settings, splits, schemas, expert)


def _plain(value: Any) -> Any:
    """A config value as plain python (a string stays a string; lists and mappings become plain ones)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _checked(settings: ToolSettings, first_row: dict, env_cfg: Any) -> list[dict]:
    """The tools' schemas, from one environment made and reset here on the first training task."""
    what = f"env.factory={settings.factory}" if settings.factory else "env.tools"
    env = ToolEnv(settings)
    if env.factory is not None:
        try:
            with env.rng.active():
                instance = env.factory()
        except Exception as err:
            raise UserError(f"{what}() raised {one_line(err)}") from None
        if not callable(getattr(instance, "reset", None)):
            raise UserError(f"{what} returned a {type(instance).__name__} without reset(**columns): TRL's contract")
    columns = list(first_row["columns"])
    for spec, fn in zip(settings.reward_funcs, env.reward_funcs):
        check_reward_func(fn, spec, columns)
    task = Task(task_id="probe", task_type="probe", seed=int(first_row["seed"]), payload=first_row)
    try:
        env.reset(task)
    except UserError:
        raise
    except Exception as err:
        raise UserError(f"{what}: reset(**{columns}) failed: {one_line(err)}") from None
    if not env.tools:  # a plain question-and-answer task, as TRL trains one without tools: the control for a tool
        log.warning(f"{what} has no tools (public methods, TRL's contract, or env.tools): every reply is the answer")
    if not env.reward_funcs and not callable(getattr(env.instance, "get_reward", None)):
        raise UserError(f"{what} has no reward: give the class get_reward() or set env.reward_funcs=[MODULE:fn]")
    env.close()
    return [{"type": "function", "function": schema} for schema in env.schemas.values()]
