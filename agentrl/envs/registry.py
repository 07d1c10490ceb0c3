"""`env.name` -> the adapter that builds it: the built-ins, then the plug-ins. No substring matching on names.

Adapters are imported lazily, so that listing environments (`agentrl envs`)
never imports an engine that is not installed.

Plug-ins (docs/environments.md, "Plug-ins") are installed packages that declare an
entry point in the group ``agentrl.envs`` whose object is an ``EnvSpec``. The spec
names the plug-in's config folder (its ``env/<name>.yaml``), which Hydra searches
after agentrl's own conf/, and its schema, registered as ``env/<name>_schema``.
A plug-in that fails to load is one line in ``plugin_problems()``; the others load.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.envs.base import TaskSuite
from agentrl.errors import UserError

ENTRY_POINT_GROUP = "agentrl.envs"


@dataclass(frozen=True)
class EnvSpec:
    name: str
    description: str
    builder: str  # "module:function", called with the env config node
    requires: tuple[str, ...] = ()  # importable modules the adapter needs
    install_hint: str = ""
    config_dir: str | None = None  # a plug-in's config folder, holding env/<name>.yaml (built-ins: agentrl's conf/)
    schema: Any = None  # a plug-in's schema: a dataclass extending agentrl.config.EnvConfig, or None
    source: str = "built-in"  # "built-in", or the distribution a plug-in comes from

    def availability(self) -> tuple[bool, str]:
        missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
        if missing:
            return False, f"needs {', '.join(missing)}: {self.install_hint}"
        return True, ""

    def build(self, env_cfg: Any) -> TaskSuite:
        ok, reason = self.availability()
        if not ok:
            raise UserError(f"env={self.name} is not usable here: {reason}")
        module_name, func_name = self.builder.split(":")
        builder: Callable[[Any], TaskSuite] = getattr(importlib.import_module(module_name), func_name)
        return builder(env_cfg)


BUILT_IN: dict[str, EnvSpec] = {
    spec.name: spec
    for spec in (
        EnvSpec(
            name="household",
            description="built-in ALFWorld-style household tasks, pure Python (levels: easy, default, medium, long)",
            builder="agentrl.envs.household_adapter:build",
        ),
        EnvSpec(
            name="household_team",
            description="household played by a team: a checker, then an actor or a finisher (Dr. MAS, norm_scope=agent)",
            builder="agentrl.envs.household_adapter:build_team",
        ),
        EnvSpec(
            name="alfworld",
            description="ALFWorld's real text engine (TextWorld + PDDL); the published splits, or generated games",
            builder="agentrl.envs.alfworld.adapter:build",
            requires=("alfworld", "textworld"),
            install_hint="pip install -e '.[alfworld]' (builds Fast Downward: needs cmake, g++, make)",
        ),
        EnvSpec(
            name="scienceworld",
            description="ScienceWorld's simulator (a JVM): 30 science tasks, train/dev/test variations",
            builder="agentrl.envs.scienceworld.adapter:build",
            requires=("scienceworld",),
            install_hint="pip install -e '.[scienceworld]' and a Java runtime (apt-get install default-jre-headless)",
        ),
        EnvSpec(
            name="gym",
            description="your own Gymnasium-style text env: env.factory=MODULE:CALLABLE (tasks are seeds)",
            builder="agentrl.envs.gym_text:build",
        ),
        EnvSpec(
            name="tools",
            description="agents that call tools: TRL's environment_factory class or tools=, env.factory=MODULE:CALLABLE",
            builder="agentrl.envs.tools_suite:build",
        ),
        EnvSpec(
            name="gem",
            description="GEM's games and reasoning-gym tasks: env.id=game:Sokoban-v0-easy (agentrl envs lists ids)",
            builder="agentrl.envs.gem_games:build",
            requires=("gem",),
            install_hint="pip install -e '.[gem]'",
        ),
    )
}


@functools.cache
def _plugins() -> tuple[dict[str, EnvSpec], tuple[str, ...]]:
    """Every plug-in that loads, by name, and one line per plug-in that does not (loaded once per process)."""
    from importlib.metadata import entry_points

    found: dict[str, EnvSpec] = {}
    problems: list[str] = []
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(entry.dist, "name", None) or "?"
        where = f"plug-in {entry.name!r} ({dist}, {entry.value})"
        try:
            spec = entry.load()
        except Exception as err:  # a broken plug-in is reported, never fatal to the others
            text = str(err).strip().splitlines()
            problems.append(f"{where} failed to load: {type(err).__name__}: {text[0] if text else ''}".rstrip(": "))
            continue
        if not isinstance(spec, EnvSpec):
            problems.append(f"{where} is a {type(spec).__name__}, not an agentrl.envs.registry.EnvSpec")
        elif spec.name != entry.name:
            problems.append(f"{where} names its spec {spec.name!r}; the entry point and the spec must agree")
        elif spec.name in BUILT_IN or spec.name in found:
            problems.append(f"{where} is ignored: env={spec.name} is already taken")
        else:
            found[spec.name] = EnvSpec(**{**spec.__dict__, "source": dist})
    return found, tuple(problems)


def plugin_problems() -> tuple[str, ...]:
    """One line for each installed plug-in that could not be loaded."""
    return _plugins()[1]


def all_environments() -> dict[str, EnvSpec]:
    """The built-ins, then the plug-ins that loaded."""
    return {**BUILT_IN, **_plugins()[0]}


class _Environments(Mapping):
    """``ENVIRONMENTS``: every environment by name, the built-ins and the installed plug-ins (loaded at first use)."""

    def __getitem__(self, name: str) -> EnvSpec:
        return all_environments()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(all_environments())

    def __len__(self) -> int:
        return len(all_environments())


ENVIRONMENTS: Mapping[str, EnvSpec] = _Environments()


def get_spec(name: str) -> EnvSpec:
    spec = all_environments().get(name)
    if spec is None:
        problems = "".join(f"; {line}" for line in plugin_problems())
        raise UserError(f"env.name='{name}' is not registered; available: {', '.join(all_environments())}{problems}")
    return spec


def make_suite(env_cfg: Any, faults: bool = True) -> TaskSuite:
    """Build the task suite that `env.name` names; with `faults`, its environments inject `env.fault_rate`'s faults
    and `env.step_latency_s`'s waits (test and benchmark keys, off by default)."""
    suite = get_spec(env_cfg.name).build(env_cfg)
    latency = getattr(env_cfg, "step_latency_s", 0.0)
    if latency > 0 and faults:
        from agentrl.envs.latency import SlowSuite

        suite = SlowSuite(suite, latency)
    rate = getattr(env_cfg, "fault_rate", 0.0)
    if rate > 0 and faults:  # here, so that every caller's pool (training, eval) gets the faults
        from agentrl.envs.faults import FaultySuite

        suite = FaultySuite(suite, rate)
    return suite


# --------------------------------------------------------------------------- Hydra: the plug-ins' configs


def register_plugin_configs() -> None:
    """Make the plug-ins' configs composable: their config folders join Hydra's search path (after agentrl's
    conf/), and their schemas go into Hydra's ConfigStore as ``env/<name>_schema``. Idempotent."""
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    for spec in _plugins()[0].values():
        if spec.schema is not None:
            ConfigStore.instance().store(group="env", name=f"{spec.name}_schema", node=spec.schema)
    Plugins.instance().register(_search_path_plugin())


@functools.cache
def _search_path_plugin() -> type:
    """A Hydra SearchPathPlugin class (one per process, so that registering twice is a no-op)."""
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    class AgentrlEnvPlugins(SearchPathPlugin):
        def manipulate_search_path(self, search_path) -> None:
            for spec in _plugins()[0].values():
                if spec.config_dir:
                    where = spec.config_dir
                    if "://" not in where:
                        where = f"file://{where}"
                    search_path.append(provider=f"agentrl-env-{spec.name}", path=where)

    return AgentrlEnvPlugins
