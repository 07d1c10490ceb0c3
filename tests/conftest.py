"""Shared fixtures: a throwaway tiny-model cache and a helper that runs the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentrl.cpu import STRICT_BLAS
from tests.extras import installed

REPO = Path(__file__).resolve().parents[1]

# MKL reads its reproducibility setting at the process's first matrix product, which in a test session comes long
# before any test's `agentrl train rollout.turns=ready` could set it (agentrl/cpu.py, STRICT_BLAS); the ready-turns
# tests compare rows across batches, so the session asks for it before anything multiplies
os.environ.setdefault(*STRICT_BLAS)


def pytest_collection_modifyitems(config, items):
    """A test marked `gem` skips, with the install line, where the gem extra is not installed."""
    if installed("gem-llm"):
        return
    skip = pytest.mark.skip(reason="needs the gem extra: pip install -e '.[gem]'")
    for item in items:
        if item.get_closest_marker("gem"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One tiny-model cache for the whole session, so the model is built once."""
    return tmp_path_factory.mktemp("agentrl-cache")


def agentrl_cli(
    cache_dir: Path, cwd: Path, *args: str, timeout: int = 600, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run `agentrl ...` in a subprocess, as a user would, offline and on the session's tiny-model cache."""
    full_env = {
        **os.environ,
        "AGENTRL_CACHE": str(cache_dir),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "PYTHONPATH": str(REPO),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "agentrl.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_env(cache_dir: Path) -> dict:
    """The environment of a CLI subprocess started by hand (offline, the session's tiny-model cache)."""
    return {**os.environ, "AGENTRL_CACHE": str(cache_dir), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}


def tiny_model_folder(cache_dir: Path, *overrides: str) -> Path:
    """The cached tiny-model folder that `agentrl sft <overrides>` starts from (built on first use)."""
    from hydra import compose

    from agentrl.config.typed import typed
    from agentrl.models.tiny import ensure_tiny_model

    with hydra_initialized():
        cfg = typed(compose(config_name="sft", overrides=[*overrides, f"model.tiny.cache_dir={cache_dir}"]))
    return ensure_tiny_model(cfg.model.tiny, cfg.env)


def records_by_iteration(run_dir: Path) -> dict[int, dict]:
    """A run's metrics.jsonl by iteration, without the time/* keys (what two runs of one config share)."""
    import json

    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        out[record["iteration"]] = {k: v for k, v in record.items() if not k.startswith("time/")}
    return out


@pytest.fixture
def run_cli(cache_dir, tmp_path):
    """Run `agentrl ...` in a subprocess from a scratch folder (see `agentrl_cli`)."""

    def run(*args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
        return agentrl_cli(cache_dir, tmp_path, *args, timeout=timeout, env=env)

    return run


@contextmanager
def hydra_initialized():
    """Hydra initialised on agentrl's conf/ for compose() calls, with the schemas registered."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from agentrl.config.store import register_configs
    from agentrl.hydra_paths import config_dir

    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            yield
    finally:
        GlobalHydra.instance().clear()


@pytest.fixture
def hydra_conf():
    """`hydra_initialized` for one test."""
    with hydra_initialized():
        yield
