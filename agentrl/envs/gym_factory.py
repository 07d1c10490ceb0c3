"""env=gym's factory (agentrl/envs/gym_text.py): `env.factory=MODULE:CALLABLE` found, imported and called, each
failure one line; and whether a failed reset reached for the network."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.errors import UserError

# Exceptions whose presence in a failed reset's chain says the environment reached for the network.
NETWORK_ERRORS = ("URLError", "ConnectionError", "gaierror", "HTTPError", "Timeout", "ConnectTimeout")


def load_factory(spec: str) -> Callable[..., Any]:
    """The callable `spec` ("module:callable", the module importable or a .py file in the working directory)
    names; UserError in one line where it does not import or is not callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"env.factory={spec!r} is not MODULE:CALLABLE (e.g. my_envs:make_env)")
    if os.getcwd() not in sys.path:  # a file in the working directory is enough, as the docs promise
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise UserError(f"env.factory={spec!r}: module {module_name!r} does not import: {one_line(err)}") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise UserError(f"env.factory={spec!r}: {module_name!r} has no {attr!r}")
    if not callable(target):
        raise UserError(f"env.factory={spec!r} is a {type(target).__name__}, not a callable that returns an env")
    return target


def factory_source(spec: str) -> Path | None:
    """The source file of the module a factory ("module:callable") names, found as `load_factory` finds it (a
    module on the path, or a .py file in the working directory), without importing it; None where there is none."""
    import importlib.util

    module_name = spec.partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        found = None
    origin = getattr(found, "origin", None)
    candidates = [Path(origin)] if origin else [Path(os.getcwd()) / f"{module_name}.py"]
    return next((path for path in candidates if path.is_file()), None)


def make_object(spec: str, kwargs: dict) -> Any:
    """One environment object from the factory `spec` names; UserError where it fails or lacks reset/step."""
    factory = load_factory(spec)
    try:
        env = factory(**kwargs)
    except Exception as err:
        raise UserError(f"env.factory={spec}(**{kwargs}) raised {one_line(err)}") from None
    missing = [name for name in ("reset", "step") if not callable(getattr(env, name, None))]
    if missing:
        raise UserError(
            f"env.factory={spec} returned a {type(env).__name__} without {' and '.join(missing)}(): "
            "it needs reset(seed=...) -> (observation, info) and step(text) -> (observation, reward, terminated, "
            "truncated, info)"
        )
    return env


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0].strip()}" if text else type(err).__name__


def needs_network(err: BaseException) -> bool:
    """Whether an exception (or one it came from) is a failed network fetch: a download at reset, offline."""
    seen = 0
    while err is not None and seen < 10:
        if type(err).__name__ in NETWORK_ERRORS or "nltk" in str(err).lower() or "urlopen" in str(err).lower():
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False
