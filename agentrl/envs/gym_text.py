"""env=gym: any Gymnasium-style text environment, from a factory, in one override (docs/environments.md, "Your own
environment in one override").

`env.factory=MODULE:CALLABLE` names a callable that returns an object with Gymnasium's text-env methods:

- ``reset(seed=...) -> (observation, info)``, the observation a str;
- ``step(text) -> (observation, reward, terminated, truncated, info)`` (gym's older 4-tuple
  ``(observation, reward, done, info)`` is read too).

agentrl builds the task suite around it:

- Tasks are seeds. ``train`` holds seeds ``seed_base .. seed_base + train_seeds - 1``; ``eval_in_distribution``
  the next ``eval_seeds`` seeds, so the splits are disjoint; ``eval_out_of_distribution`` (where ``env.ood_kwargs``
  is given) the same held-out seeds on an environment built with those kwargs. Indices fold into a split's size.
- Success is what the environment says: the first of ``info["is_success"]`` (Stable-Baselines3's key),
  ``info["success"]``, ``info["won"]`` that a step sets; else a step that terminates (not truncated) with at
  least ``env.success_reward``, or whose observation starts with ``env.success_text``. A partial reward at a time
  limit is never success.
- Admissible actions where the environment lists them (``info["admissible_actions"]``, an
  ``admissible_actions`` attribute or method, or an ``action_space`` that is a list of str); else, where it has
  ``sample_random_action()``, the distinct values of ``env.random_candidates`` draws of it are shown as
  candidates, in natural order (the random policy plays one of them uniformly). With neither, no random policy can play it.
- Rewards are the environment's (``env.reward=env``), or 1 on the winning step and 0 elsewhere
  (``env.reward=success``: where an environment's progress rewards pay a lost episode nearly as much as a won one).
- The GiGPO anchor is ``info["state_key"]`` where the environment gives one, else the observation text.
- ``info["suffix"]`` (GEM's convention: the board) is shown after the observation.
- An environment with an ``expert_plan()`` method (the actions that win the episode just reset) is an expert that
  ``agentrl sft`` clones.
- Each environment has its own python ``random`` and numpy global RNG state (`OwnRandomState`), swapped in around
  every call into the object and seeded from the task's seed at each reset: GEM seeds both globally at reset and
  draws its games' chance from them, so in-process episodes played in lockstep would otherwise draw from one
  stream (one episode's tiles depending on the others' moves) and every reset would reseed the trainer's own RNG.
  The draws of `sample_random_action()` for the candidates leave the environment's state as it was, so the
  episode does not depend on how many are drawn, and a plan computed on a copy replays exactly.

The factory runs where the environment lives (a worker process too), at a slot's first reset; the suite's build
makes one environment first and checks it, so that a broken factory is one line before anything is built.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.envs.base import Observation, Step, Task
from agentrl.envs.gym_factory import make_object, needs_network, one_line
from agentrl.envs.own_random import OwnRandomState
from agentrl.errors import UserError

SPLITS = ("train", "eval_in_distribution", "eval_out_of_distribution")
SUCCESS_KEYS = ("is_success", "success", "won")
ACTION_LIST_KEYS = ("admissible_actions", "valid_actions", "legal_actions")


@dataclass(frozen=True)
class GymSettings:
    """What a `GymTextEnv` needs to be built anywhere (picklable: worker processes build their own)."""

    factory: str  # "module:callable"
    kwargs: dict = field(default_factory=dict)
    reply_format: str = "action"
    success_reward: float | None = None
    success_text: str | None = None  # a terminating step whose observation starts with this text wins
    reward: str = "env"  # env: the environment's own rewards; success: 1 on the winning step, else 0
    max_steps: int = 50
    random_candidates: int = 8
    anchor: str = "state"  # state: info["state_key"], else the text; board: a several-line suffix, else the text


def natural_order(text: str) -> tuple:
    """A sort key that puts "2" before "10": digit runs compare as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part)


def unbox(action: str) -> str:
    """`\\boxed{X}` -> X (an environment's own sample of its reply format); anything else as it is."""
    text = action.strip()
    if text.startswith("\\boxed{") and text.endswith("}"):
        return text[len("\\boxed{") : -1].strip()
    return text


class GymTextEnv:
    """One episode at a time of a Gymnasium-style text environment (the AgentEnv protocol)."""

    def __init__(self, settings: GymSettings, ood_kwargs: dict | None = None):
        self.settings, self.ood_kwargs = settings, ood_kwargs
        self.rng = OwnRandomState()
        self._env: Any = None
        self._built_for: str | None = None  # "in" or "ood": which kwargs the object was made with
        self._task_text, self._steps, self._done = "", 0, True
        self._listed: list[str] | None = None

    def reset(self, task: Task) -> Observation:
        which = task.payload.get("kwargs", "in")
        if self._env is None or self._built_for != which:
            self.close()
            kwargs = self.ood_kwargs if which == "ood" else self.settings.kwargs
            with self.rng.active():
                self._env, self._built_for = make_object(self.settings.factory, dict(kwargs or {})), which
        self.rng.seed(task.seed if task.seed is not None else 0)
        with self.rng.active():
            result = self._env.reset(seed=task.seed)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"reset returned {type(result).__name__}, not (observation, info)")
        obs, info = result
        text = _text(obs, "reset")
        info = info if isinstance(info, dict) else {}
        self._task_text = str(info.get("task") or text)
        self._steps, self._done = 0, False
        suffix = info.get("suffix")
        first = suffix if isinstance(suffix, str) and suffix.strip() else text
        return self._observe(first, info, suffix_shown=True)

    def step(self, action: str) -> Step:
        if self._env is None or self._done:
            raise RuntimeError("step() needs a reset() first")
        with self.rng.active():
            result = self._env.step(action)
        if not isinstance(result, tuple) or len(result) not in (4, 5):
            raise TypeError(f"step returned {type(result).__name__}, not (obs, reward, terminated, truncated, info)")
        if len(result) == 5:
            obs, reward, terminated, truncated, info = result
        else:  # gym's older API: (obs, reward, done, info)
            obs, reward, terminated, info = result
            truncated = False
        text = _text(obs, "step")
        if isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(float(reward)):
            raise ValueError(f"step returned the reward {reward!r}, not a finite number")
        info = info if isinstance(info, dict) else {}
        self._steps += 1
        won = self._won(info, text, float(reward), bool(terminated), bool(truncated))
        self._done = bool(terminated) or bool(truncated) or won or self._steps >= self.settings.max_steps
        accepted = self._listed is None or unbox(action) in self._listed
        paid = float(won) if self.settings.reward == "success" else float(reward)
        return Step(self._observe(text, info), paid, self._done, won, accepted)

    def _won(self, info: dict, text: str, reward: float, terminated: bool, truncated: bool) -> bool:
        for key in SUCCESS_KEYS:
            if key in info:
                return bool(info[key])
        if not terminated or truncated:  # a time limit's partial reward is never success
            return False
        threshold, announced = self.settings.success_reward, self.settings.success_text
        return (threshold is not None and reward >= threshold) or (announced is not None and text.startswith(announced))

    def _observe(self, text: str, info: dict, suffix_shown: bool = False) -> Observation:
        suffix = info.get("suffix")
        if isinstance(suffix, str) and suffix.strip() and not suffix_shown:
            text = f"{text}\n{suffix}"
        self._listed = self._actions(info)
        admissible = self._listed if self._listed is not None else self._candidates()
        return Observation(
            text=text.strip(),
            admissible_actions=admissible,
            task_description=self._task_text.strip(),
            anchor_key=self._anchor(info),
        )

    def _actions(self, info: dict) -> list[str] | None:
        """The actions the environment lists for this state, or None where it lists none."""
        listed: Any = next((info[key] for key in ACTION_LIST_KEYS if key in info), None)
        if listed is None:
            attr = getattr(self._env, "admissible_actions", None)
            if callable(attr):
                with self.rng.active():
                    attr = attr()
            listed = attr
        if listed is None:
            space = getattr(self._env, "action_space", None)
            if isinstance(space, (list, tuple)) and space and all(isinstance(a, str) for a in space):
                listed = space
        if listed is None:
            return None
        return list(dict.fromkeys(unbox(str(a)) for a in listed))

    def _candidates(self) -> list[str]:
        """`random_candidates` draws of the environment's own random action (none where it has none)."""
        sample = getattr(self._env, "sample_random_action", None)
        if not callable(sample):
            return []
        try:
            with self.rng.active(keep=False):  # the draws leave the episode's chance as it was
                draws = [unbox(str(sample())) for _ in range(self.settings.random_candidates)]
        except NotImplementedError:
            return []
        # distinct and in a fixed order, so that a state's prompt does not change with the draws' order
        return sorted({d for d in draws if d}, key=natural_order)

    def _anchor(self, info: dict) -> Hashable | None:
        key = info.get("state_key")
        if key is not None:
            try:
                hash(key)
                return key
            except TypeError:
                return repr(key)
        suffix = info.get("suffix")
        if self.settings.anchor == "board" and isinstance(suffix, str) and suffix.strip().count("\n") >= 2:
            return suffix.strip()
        return None  # the observation text

    def expert_plan(self) -> list[str]:
        """The wrapped environment's `expert_plan()` for the episode just reset, called in its own RNG state."""
        with self.rng.active():
            return [unbox(str(action)) for action in self._env.expert_plan()]

    def close(self) -> None:
        env, self._env = self._env, None
        if env is not None and callable(getattr(env, "close", None)):
            try:
                with self.rng.active():
                    env.close()
            except Exception:
                pass


def _text(obs: Any, where: str) -> str:
    if not isinstance(obs, str):
        raise TypeError(f"{where} returned an observation of type {type(obs).__name__}, not text (str)")
    return obs


class GymTextSuite:
    """Seeds as tasks around a factory's environments (see the module docstring)."""

    def __init__(
        self,
        name: str,
        label: str,
        settings: GymSettings,
        train_seeds: int,
        eval_seeds: int,
        seed_base: int = 0,
        ood_kwargs: dict | None = None,
        random_policy_problem: str | None = None,
        has_expert: bool = False,
    ):
        self.name, self.settings, self.ood_kwargs = name, settings, ood_kwargs
        if has_expert:  # only then: has_expert(suite) in agentrl/envs/base.py reads the attribute's presence
            self.expert_plan = self._expert_plan
        self.splits = SPLITS if ood_kwargs is not None else SPLITS[:2]
        self.eval_split = "eval_in_distribution"
        self.task_types = (label,)
        self.max_steps = settings.max_steps
        self.reply_format = settings.reply_format
        # where a random policy cannot play (no listed actions, no sample_random_action): one line, else None
        self.random_policy_problem = random_policy_problem
        held_out = seed_base + train_seeds
        self._first = {"train": seed_base, "eval_in_distribution": held_out, "eval_out_of_distribution": held_out}
        self._size = {"train": train_seeds, "eval_in_distribution": eval_seeds, "eval_out_of_distribution": eval_seeds}

    def split_size(self, split: str) -> int:
        self._check(split)
        return self._size[split]

    def task(self, split: str, index: int) -> Task:
        self._check(split)
        seed = self._first[split] + index % self._size[split]
        which = "ood" if split == "eval_out_of_distribution" else "in"
        return Task(task_id=f"{split}/{seed}", task_type=self.task_types[0], seed=seed, payload={"kwargs": which})

    def make_env(self) -> GymTextEnv:
        return GymTextEnv(self.settings, self.ood_kwargs)

    def _expert_plan(self, task: Task) -> list[str]:
        """The environment's own `expert_plan()` for the task's seed, read on a fresh environment just reset."""
        env = self.make_env()
        try:
            env.reset(task)
            return env.expert_plan()
        finally:
            env.close()

    def _check(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(f"unknown {self.name} split {split!r}; valid splits: {', '.join(self.splits)}")


def env_max_steps(env: Any) -> int | None:
    """The episode limit an environment states: `max_turns`, `max_steps` or Gymnasium's
    `spec.max_episode_steps`, on it or on what it wraps."""
    for obj in (env, getattr(env, "unwrapped", None)):
        for name in ("max_turns", "max_steps", "max_episode_steps"):
            value = getattr(obj, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        steps = getattr(getattr(obj, "spec", None), "max_episode_steps", None)
        if isinstance(steps, int) and steps > 0:
            return steps
    return None


def checked_suite(
    name: str,
    label: str,
    settings: GymSettings,
    env_cfg: Any,
    *,
    ood_kwargs: dict | None,
    max_steps: int | None,
    what: str,
) -> GymTextSuite:
    """The suite, after one environment made here has been reset and, where it can, played one random step: a
    factory, an environment or a reset that is broken, or a download offline, is one line (`what` names it)
    before anything is built."""
    probe = GymTextEnv(settings)
    try:
        with probe.rng.active():
            probe._env, probe._built_for = make_object(settings.factory, dict(settings.kwargs)), "in"
        limit = max_steps or env_max_steps(probe._env)
        if limit is None:
            raise UserError(f"{what} states no episode limit (max_turns, max_steps): set env.max_steps")
        settings = replace(settings, max_steps=int(limit))
        probe.settings = settings
        try:
            first = probe.reset(Task(task_id="probe", task_type=label, seed=int(env_cfg.seed_base)))
        except UserError:
            raise
        except Exception as err:
            if needs_network(err):
                raise UserError(
                    f"{what} cannot run here: its reset fetches data from the network ({one_line(err)})"
                ) from None
            raise UserError(f"{what}: reset(seed={env_cfg.seed_base}) failed: {one_line(err)}") from None
        expert = callable(getattr(probe._env, "expert_plan", None))
        problem = None
        if not first.admissible_actions:
            problem = (
                f"{what} lists no actions and has no sample_random_action(), so no random policy can play it "
                "(model=tiny's warm-up, agentrl eval --random and sft.random_episodes need one): use a pretrained model= "
                "(agentrl models list)"
            )
    finally:
        probe.close()
    return GymTextSuite(
        name,
        label,
        settings,
        int(env_cfg.train_seeds),
        int(env_cfg.eval_seeds),
        int(env_cfg.seed_base),
        ood_kwargs,
        problem,
        expert,
    )


def build(env_cfg: Any) -> GymTextSuite:
    """The suite for `env=gym env.factory=MODULE:CALLABLE`."""
    from agentrl.run_folder import as_container

    factory = str(env_cfg.factory)
    settings = GymSettings(
        factory=factory,
        kwargs=dict(as_container(env_cfg.kwargs) or {}),
        reply_format=env_cfg.reply_format,
        success_reward=env_cfg.success_reward,
        success_text=env_cfg.success_text,
        reward=env_cfg.reward,
        random_candidates=int(env_cfg.random_candidates),
        anchor="state",
    )
    ood = as_container(env_cfg.ood_kwargs)
    label = factory.rpartition(":")[2] or factory
    return checked_suite(
        "gym",
        label,
        settings,
        env_cfg,
        ood_kwargs=dict(ood) if ood is not None else None,
        max_steps=env_cfg.max_steps,
        what=f"env.factory={factory}",
    )
