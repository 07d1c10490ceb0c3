"""env=tools: agents that call tools, from TRL's contracts unchanged (docs/environments.md, "Tool-calling agents").

`env.factory=MODULE:CALLABLE` follows TRL's ``environment_factory``: one instance per episode; ``reset(**columns)``
returns text appended to the user's message (or None); every public method other than ``reset`` and
``get_reward`` is a tool, described by its type hints and Google-style docstring (transformers'
``get_json_schema``); ``get_reward()``, where it exists, is the environment's reward. `env.tools=[MODULE:fn]` are
TRL's ``tools=``, plain functions, with or without a factory. `env.reward_funcs=[MODULE:fn]` have TRL's reward
signature: ``fn(prompts, completions, environments, **columns) -> list[float | None]``.

- Tasks: the rows of `env.dataset` (a JSONL file or a `datasets` folder; ``prompt`` a string or chat messages, the
  other columns go to ``reset`` and the reward functions), or, with `env.prompt`, seeds (``reset(seed=...)``).
  Held-out tasks are `env.eval_dataset`'s rows, else `env.eval_rows` rows of the dataset set aside (a fixed
  shuffle), else the seeds after the training seeds: never trained on.
- One step is one reply (agentrl/envs/tools_calls.py): its tool calls run in order and their results go back as
  ``tool`` messages; a reply without a call is the final answer and ends the episode, which is then scored (the
  reward sits on its last step). A call that cannot run (unknown tool, missing, extra or mistyped arguments, a tool
  that raises or runs past `env.tool_timeout_s`) is answered with an error message: the episode goes on. A tool
  past its timeout keeps running in its thread; its result is dropped.
- Success: the instance's ``is_success`` or ``success`` attribute where it is a bool after the episode, else a
  total reward of at least `env.success_reward`.
- GiGPO's anchor: the instance's ``state_key`` attribute (or property) where it has one, else a digest of the
  episode's tool calls so far.
- Python's global ``random`` and numpy's are the episode's own (`OwnRandomState`, seeded from the task's seed at
  reset) around every call into the instance and the tools: an environment that draws from them unseeded, as TRL's
  2048 example does, replays exactly.
- An expert (`agentrl sft`, the tiny model's warm-up): `env.expert=MODULE:fn`, ``fn(environment, **columns)`` after
  reset returns the episode's actions, each a tool call ``{"name": ..., "arguments": {...}}`` or the final answer.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.envs.base import Observation, Step, Task
from agentrl.envs.gym_factory import load_factory, one_line
from agentrl.envs.own_random import OwnRandomState
from agentrl.envs.tools_calls import decode_action
from agentrl.errors import UserError

SPLITS = ("train", "eval_in_distribution")
NOT_TOOLS = ("reset", "get_reward")
SUCCESS_ATTRIBUTES = ("is_success", "success")
# the JSON schema types a tool's arguments are checked against, and the python values each accepts
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass(frozen=True)
class ToolSettings:
    """What a `ToolEnv` needs to be built anywhere (picklable: worker processes build their own)."""

    factory: str | None  # "module:callable", TRL's environment_factory
    tools: tuple[str, ...] = ()  # "module:function", TRL's tools=
    reward_funcs: tuple[str, ...] = ()
    max_steps: int = 8
    success_reward: float = 1.0
    tool_timeout_s: float = 10.0


def public_tools(instance: Any) -> dict[str, Callable]:
    """An environment instance's tools, as TRL lists them: the public functions of its class but reset and
    get_reward (properties are not tools), bound to the instance."""
    return {
        name: getattr(instance, name)
        for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if not name.startswith("_") and name not in NOT_TOOLS
    }


def tool_schema(fn: Callable, where: str) -> dict:
    """transformers' JSON schema of a tool; UserError in one line where its type hints or docstring cannot say."""
    from transformers.utils import get_json_schema

    try:
        return get_json_schema(fn)
    except Exception as err:
        raise UserError(
            f"{where}: tool {getattr(fn, '__name__', fn)!r} cannot be described ({one_line(err)}): give every "
            "argument a type hint and the function a Google-style docstring with an Args: section"
        ) from None


def check_reward_func(fn: Callable, spec: str, columns: list[str]) -> None:
    """One line where a reward function cannot take TRL's keyword arguments."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    names = ["prompts", "completions", "environments", *columns]
    try:
        signature.bind(**dict.fromkeys(names))
    except TypeError as err:
        raise UserError(
            f"env.reward_funcs: {spec} cannot be called as TRL calls a reward function, "
            f"fn(prompts=, completions=, environments=, <columns>=) ({err}): give it **kwargs"
        ) from None


class ToolEnv:
    """One episode at a time of a tool-calling environment (the AgentEnv protocol; the module docstring)."""

    def __init__(self, settings: ToolSettings):
        self.settings = settings
        self.rng = OwnRandomState()
        self.factory = load_factory(settings.factory) if settings.factory else None
        self.standalone = {spec.rpartition(":")[2]: load_factory(spec) for spec in settings.tools}
        self.reward_funcs = [load_factory(spec) for spec in settings.reward_funcs]
        self.instance: Any = None
        self.tools: dict[str, Callable] = {}
        self.schemas: dict[str, dict] = {}
        self._calls: list[dict] = []

    def reset(self, task: Task) -> Observation:
        self.rng.seed(task.seed)
        columns = dict(task.payload.get("columns", {}))
        messages = _messages(task.payload.get("prompt"))
        with self.rng.active():
            self.instance = self.factory() if self.factory is not None else None
            extra = self.instance.reset(**columns) if self.instance is not None else None
        if isinstance(extra, str) and extra:  # TRL's rule: appended to the last message
            messages[-1] = {**messages[-1], "content": str(messages[-1]["content"]) + extra}
        self.tools = {**self.standalone, **(public_tools(self.instance) if self.instance is not None else {})}
        for name, fn in self.tools.items():  # described once: every instance has the same tools
            if name not in self.schemas:
                self.schemas[name] = tool_schema(fn, "env.tools")["function"]
        self.columns, self.prompt, self.completion = columns, messages, []
        self.steps, self.total, self._calls = 0, 0.0, []
        return Observation(
            text=str(messages[-1]["content"]),
            admissible_actions=[],
            task_description=str(messages[-1]["content"]),
            anchor_key=self._anchor(),
            messages=messages,
        )

    def step(self, action: str) -> Step:
        content, calls = decode_action(action)
        self.steps += 1
        named = [c for c in calls if "name" in c and "error" not in c]
        assistant: dict[str, Any] = {"role": "assistant", "content": content}
        if named:
            assistant["tool_calls"] = [{"type": "function", "function": dict(c)} for c in named]
        self.completion.append(assistant)
        # both counts on every step, zero included: every iteration of this route logs rollout/tool_calls and
        # rollout/tool_errors; the kinds (tool_errors/<kind>) where they occur
        counts = {"tool_calls": len(calls), "tool_errors": 0}
        if not calls:
            return self._finish(content, counts)
        results = []
        for call in calls:
            message, kind = self._run(call)
            results.append(message)
            if kind is not None:
                counts["tool_errors"] += 1
                counts[f"tool_errors/{kind}"] = counts.get(f"tool_errors/{kind}", 0) + 1
        self.completion += results
        self._calls += [{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls]
        if self.steps >= self.settings.max_steps:
            return self._finish(content, counts, results)
        observation = Observation(
            text="\n".join(m["content"] for m in results),
            admissible_actions=[],
            task_description=str(self.prompt[-1]["content"]),
            anchor_key=self._anchor(),
            messages=results,
            counts=counts,
        )
        return Step(observation, 0.0, False, False, counts["tool_errors"] == 0)

    def _run(self, call: dict) -> tuple[dict, str | None]:
        """The tool message answering one call, and the kind of its error (None where the tool ran)."""
        name = str(call.get("name", "tool"))
        if "error" in call:
            return _tool_message(name, f"Error: {call.get('message', call['error'])}"), str(call["error"])
        fn = self.tools.get(name)
        if fn is None:
            return _tool_message(name, f"Error: unknown tool {name!r}; the tools are {', '.join(self.tools)}"), (
                "unknown_tool"
            )
        arguments = call.get("arguments") or {}
        if isinstance(arguments, str):  # some formats write the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass
        if problem := _argument_problem(fn, self.schemas[name], arguments):
            return _tool_message(name, f"Error: {problem}"), "bad_arguments"
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        future = pool.submit(self._call, fn, arguments)
        try:
            result = future.result(timeout=self.settings.tool_timeout_s)
        except concurrent.futures.TimeoutError:
            return _tool_message(name, f"Error: {name} ran past {self.settings.tool_timeout_s:g} s"), "timeout"
        except Exception as err:
            return _tool_message(name, f"Error: {one_line(err)}"), "tool_raised"
        finally:
            pool.shutdown(wait=False)
        return _tool_message(name, result if isinstance(result, str) else json.dumps(result, default=str)), None

    def _call(self, fn: Callable, arguments: dict) -> Any:
        with self.rng.active():
            return fn(**arguments)

    def _finish(self, answer: str, counts: dict, results: list[dict] | None = None) -> Step:
        """The episode's last step: its reward (get_reward and the reward functions) and success; `results`, the
        tool messages of a last step that called tools (the episode's record keeps them)."""
        with self.rng.active():
            reward = self._reward()
        won = next(
            (
                getattr(self.instance, a)
                for a in SUCCESS_ATTRIBUTES
                if isinstance(getattr(self.instance, a, None), bool)
            ),
            reward >= self.settings.success_reward,
        )
        observation = Observation(
            text=answer,
            admissible_actions=[],
            task_description=str(self.prompt[-1]["content"]),
            anchor_key=self._anchor(),
            messages=list(results or []),
            counts=counts,
        )
        return Step(observation, float(reward), True, bool(won), counts["tool_errors"] == 0)

    def _reward(self) -> float:
        total = 0.0
        if callable(getattr(self.instance, "get_reward", None)):
            total += float(self.instance.get_reward())
        for fn in self.reward_funcs:
            values = fn(
                prompts=[self.prompt],
                completions=[self.completion],
                environments=[self.instance],
                **{k: [v] for k, v in self.columns.items()},
            )
            value = list(values)[0] if values is not None else None
            if value is not None:
                total += float(value)
        return total

    def _anchor(self) -> Any:
        key = getattr(self.instance, "state_key", None)
        if key is not None and not callable(key):
            try:
                hash(key)
                return key
            except TypeError:
                return repr(key)
        return hashlib.sha1(json.dumps(self._calls, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def expert_plan(self, expert: Callable) -> list[str]:
        """The expert's actions for the episode just reset, each a JSON tool call or a final answer."""
        with self.rng.active(keep=False):
            plan = expert(self.instance, **self.columns)
        return [json.dumps(a) if isinstance(a, dict) else str(a) for a in plan]

    def close(self) -> None:
        self.instance = None


def _tool_message(name: str, content: str) -> dict:
    return {"role": "tool", "name": name, "content": content}


def _messages(prompt: Any) -> list[dict]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(m) for m in prompt]


def _argument_problem(fn: Callable, schema: dict, arguments: Any) -> str | None:
    """Why the arguments cannot go to the tool (missing, extra or mistyped), in the words the model reads."""
    if not isinstance(arguments, dict):
        return f"the arguments of {fn.__name__} are a JSON object, not {type(arguments).__name__}"
    try:
        inspect.signature(fn).bind(**arguments)
    except TypeError as err:
        return f"{fn.__name__}: {err}"
    properties = schema.get("parameters", {}).get("properties", {})
    for key, value in arguments.items():
        wanted = properties.get(key, {}).get("type")
        allowed = wanted if isinstance(wanted, list) else [wanted]
        types = tuple(t for w in allowed if w in _JSON_TYPES for t in _JSON_TYPES[w])
        if not types:
            continue
        if isinstance(value, bool) and bool not in types:  # a JSON true is no number
            return f"{fn.__name__}: argument {key!r} must be {' or '.join(allowed)}, not boolean"
        if not isinstance(value, types):
            return f"{fn.__name__}: argument {key!r} must be {' or '.join(allowed)}, not {type(value).__name__}"
    return None
