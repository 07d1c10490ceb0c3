"""env=scienceworld: ScienceWorld's simulator behind the AgentEnv protocol (docs/environments.md, "ScienceWorld").

- Splits: ScienceWorld's own train, dev and test variations of each task are agentrl's ``train``,
  ``eval_in_distribution`` and ``eval_out_of_distribution``, as EPO's index files split them (its L0 index:
  train and dev variations; its L1 index: the test variations). A split lists its (task, variation) pairs
  round-robin over the tasks, so that the first N tasks of an eval split cover every task type.
- Task types are ScienceWorld's task names (``boil``, ``melt``, ...), so eval reports success per task.
- Success is a score of 100 (the task's goal sequence completed); the reward is 10 on success, else 0, as in
  EPO's reference. An episode ends on success, on the engine's own failure (a negative score: the agent
  focused on the wrong object, say), or after ``max_steps`` steps.
- The prompt shows the action templates and the objects in view (``Observation.actions_text``), as the
  reference does; ``admissible_actions`` is every valid action-object combination, which the random
  policy draws from and ``action_valid`` checks against.
- The GiGPO anchor is a hash of the engine's object tree (``env.anchor=state``), or the observation text
  (``env.anchor=observation``, the reference's anchor).

Each ``ScienceWorldAgentEnv`` owns one JVM, started at its first reset and reused by later resets. A JVM
that dies raises from the next call (py4j's network error), which the pools turn into a fault of that
episode; the environment is then closed and a fresh one (a fresh JVM) is built at the slot's next reset.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from typing import Any

from agentrl.envs.base import Observation, Step, Task

log = logging.getLogger(__name__)

WIN_REWARD = 10.0
WIN_SCORE = 100
SPLITS = {"train": "train", "eval_in_distribution": "dev", "eval_out_of_distribution": "test"}
ANCHORS = ("state", "observation")
# EPO's index files (variations_idx/L0_idx.json, L1_idx.json) use task indices 0-28 of the engine's task list:
# every task but the last one, "use-thermometer" (the engine lists its tasks alphabetically).
EPO_EXCLUDED = ("use-thermometer",)


# A JVM with Java's default heap (a quarter of the machine's memory) grew to 960 MB of resident memory over 60
# steps here; with these options, 210 MB, at the same speed. Every episode slot holds one JVM.
JAVA_OPTIONS = "-Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def start_engine(env_step_limit: int = 100, java_options: str = JAVA_OPTIONS):
    """A ScienceWorld engine (one JVM, started with `java_options`); raises when Java is missing."""
    import scienceworld.scienceworld as sw

    # A dead JVM makes py4j log several tracebacks per call; the pool reports the fault in one line instead.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    logging.getLogger("scienceworld").setLevel(logging.WARNING)  # a line for every task it loads otherwise
    # ScienceWorldEnv starts its JVM with py4j's launch_gateway and no JVM options: give it ours.
    launch = getattr(sw, "_agentrl_launch_gateway", None) or sw.launch_gateway
    sw._agentrl_launch_gateway = launch
    sw.launch_gateway = functools.partial(launch, javaopts=java_options.split())
    try:
        return sw.ScienceWorldEnv("", envStepLimit=env_step_limit)
    finally:
        sw.launch_gateway = launch


def close_engine(engine) -> None:
    """Stop an engine's JVM, alive or dead, and leave nothing for the garbage collector to do.

    Against a dead JVM, py4j's own clean-up (the engine's ``__del__``, its objects' finalizers) retries the
    connection and logs tracebacks from inside the garbage collector; formatting a traceback there parses
    source (Python 3.11 draws its carets with ``ast``), which breaks an ``ast.parse`` running at that moment
    ("AST constructor recursion depth mismatch"). So the gateway is marked disconnected and the engine's
    ``close`` made a no-op once the JVM is gone.
    """
    gateway = getattr(engine, "_gateway", None)
    process = getattr(gateway, "java_process", None)
    if process is not None and process.poll() is None:
        try:
            engine.close()  # a live JVM: py4j's goodbye, the JVM exits on its own
        except Exception:
            pass
        try:
            process.wait(timeout=5)
        except Exception:
            process.kill()
            process.wait(timeout=10)
    try:
        gateway.shutdown_callback_server()  # a local thread: stopped whether the JVM lives or not
    except Exception:
        pass
    client = getattr(gateway, "_gateway_client", None)
    if client is not None:
        client.is_connected = False  # the finalizers of its objects send nothing
    engine.close = lambda: None  # its __del__ closes again otherwise


def actions_summary(engine) -> str:
    """What the reference's prompt shows for the available actions: the templates and the objects in view."""
    templates = engine.get_possible_actions()
    objects = engine.get_possible_objects()
    return (
        f"Valid_actions: {templates}, OBJ needs to be replaced with one of the following objects: {objects}\n"
        " example: <action>focus on door</action>"
    )


def state_key(engine) -> str:
    """A hash of the engine's object tree: the true state of the world (objects, their properties and places)."""
    tree = engine.getObjectTree()
    return hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:32]


class ScienceWorldAgentEnv:
    """One ScienceWorld episode at a time (the AgentEnv protocol), on a JVM of its own."""

    def __init__(
        self, max_steps: int, simplifications: str, env_step_limit: int, anchor: str, java_options: str = JAVA_OPTIONS
    ):
        self.max_steps, self.simplifications = max_steps, simplifications
        self.env_step_limit, self.anchor, self.java_options = env_step_limit, anchor, java_options
        self._engine = None
        self._task_text = ""
        self._valid: set[str] = set()
        self._steps = 0
        self._done = True

    def reset(self, task: Task) -> Observation:
        if self._engine is None:
            self._engine = start_engine(self.env_step_limit, self.java_options)
        engine = self._engine
        engine.load(task.payload["task_name"], int(task.payload["variation"]), self.simplifications)
        text, info = engine.reset()
        self._task_text = engine.get_task_description()
        self._steps, self._done = 0, False
        return self._observe(text, info)

    def step(self, action: str) -> Step:
        if self._engine is None or self._done:
            raise RuntimeError("step() needs a reset() first")
        valid = action in self._valid
        text, _reward, completed, info = self._engine.step(action)
        self._steps += 1
        score = int(info["score"])
        won = score >= WIN_SCORE
        self._done = won or bool(completed) or score < 0 or self._steps >= self.max_steps
        return Step(self._observe(text, info), WIN_REWARD if won else 0.0, self._done, won, valid)

    def _observe(self, text: str, info: dict) -> Observation:
        engine = self._engine
        # The engine's step already lists the valid commands (infos["valid"]): asking again costs a third of a step.
        valid = list(dict.fromkeys(info["valid"]))
        self._valid = set(valid)
        return Observation(
            text=text.strip(),
            admissible_actions=valid,
            task_description=self._task_text,
            anchor_key=state_key(engine) if self.anchor == "state" else None,
            actions_text=actions_summary(engine),
        )

    def gold_path(self, task: Task) -> list[str]:
        """The engine's gold action sequence for the task (loads it; reset before playing)."""
        if self._engine is None:
            self._engine = start_engine(self.env_step_limit, self.java_options)
        self._engine.load(task.payload["task_name"], int(task.payload["variation"]), self.simplifications, True)
        return list(self._engine.get_gold_action_sequence())

    @property
    def jvm_pid(self) -> int | None:
        """The process id of this environment's JVM (tests kill it), or None before the first reset."""
        if self._engine is None:
            return None
        return self._engine._gateway.java_process.pid

    def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            close_engine(engine)


class ScienceWorldSuite:
    """The (task, variation) pairs of each split; ``task(split, i)`` is the i-th pair, round-robin over tasks."""

    name = "scienceworld"
    splits = tuple(SPLITS)
    eval_split = "eval_in_distribution"
    max_live_episodes = 16  # a JVM per episode (~210 MB): the tiny model's build plays 16 at a time

    def __init__(self, table: dict[str, dict[str, list[int]]], tasks: list[str], env_cfg: Any):
        self.task_types = tuple(tasks)
        self.max_steps = int(env_cfg.max_steps or 30)
        java_options = getattr(env_cfg, "java_options", JAVA_OPTIONS)
        self._env_args = (self.max_steps, env_cfg.simplifications, env_cfg.env_step_limit, env_cfg.anchor, java_options)
        self._pairs = {split: _round_robin(table, tasks, key) for split, key in SPLITS.items()}

    def split_size(self, split: str) -> int:
        self._check(split)
        return len(self._pairs[split])

    def task(self, split: str, index: int) -> Task:
        self._check(split)
        pairs = self._pairs[split]
        task_name, variation = pairs[index % len(pairs)]
        return Task(
            task_id=f"{task_name}/{variation}",
            task_type=task_name,
            payload={"task_name": task_name, "variation": variation},
        )

    def make_env(self) -> ScienceWorldAgentEnv:
        return ScienceWorldAgentEnv(*self._env_args)

    def expert_plan(self, task: Task) -> list[str]:
        """The expert `agentrl sft` imitates: the engine's gold path for the task, under the run's simplifications.
        Each call starts a JVM of its own for the path (a few seconds) and stops it."""
        env = self.make_env()
        try:
            return env.gold_path(task)
        finally:
            env.close()

    def _check(self, split: str) -> None:
        if split not in self._pairs:
            raise ValueError(f"unknown scienceworld split {split!r}; valid splits: {', '.join(self.splits)}")


def _round_robin(table: dict[str, dict[str, list[int]]], tasks: list[str], key: str) -> list[tuple[str, int]]:
    """Round r holds the r-th variation of every task that has one: the first len(tasks) pairs cover all tasks."""
    lists = [(name, sorted(table[name][key])) for name in tasks]
    pairs: list[tuple[str, int]] = []
    for r in range(max((len(v) for _, v in lists), default=0)):
        pairs.extend((name, variations[r]) for name, variations in lists if r < len(variations))
    return pairs


def variation_table() -> dict[str, dict[str, list[int]]]:
    """Every task's train, dev and test variations, as the engine splits them: asked of a JVM once per
    ScienceWorld version and cached (agentrl's cache folder)."""
    from importlib.metadata import version

    from agentrl.cache import cache_root, make_cache_folder

    path = make_cache_folder(cache_root(None) / "scienceworld") / f"variations-{version('scienceworld')}.json"
    if path.is_file():
        return json.loads(path.read_text())
    engine = start_engine()
    try:
        table = {}
        for name in engine.get_task_names():
            engine.load(name, 0, "")
            table[name] = {
                "train": engine.get_variations_train(),
                "dev": engine.get_variations_dev(),
                "test": engine.get_variations_test(),
            }
    finally:
        close_engine(engine)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1))
    tmp.replace(path)
    return table


def build(env_cfg) -> ScienceWorldSuite:
    """The suite for `env=scienceworld`."""
    import shutil

    from agentrl.errors import UserError

    if shutil.which("java") is None:
        raise UserError(
            "env=scienceworld needs a Java runtime (the simulator is a JVM): apt-get install default-jre-headless"
        )
    if env_cfg.anchor not in ANCHORS:
        raise UserError(f"env.anchor={env_cfg.anchor!r} is not one of {', '.join(ANCHORS)}")
    table = variation_table()
    if env_cfg.tasks is None:
        tasks = [name for name in table if name not in EPO_EXCLUDED]
    else:
        tasks = list(env_cfg.tasks)
        if unknown := [name for name in tasks if name not in table]:
            raise UserError(f"env.tasks: unknown ScienceWorld task(s) {unknown}; known: {', '.join(table)}")
    return ScienceWorldSuite(table, tasks, env_cfg)
