"""Where metrics go: metrics.jsonl in the run folder, W&B (offline unless configured), progress (a rich bar on a
terminal, plain lines in a log: agentrl.progress).

metrics.jsonl is written through agentrl.metrics_log, which owns its format.

Every run folder is self-describing: `run.json` holds the exact command, the
package versions (environment packages included), the git revision and the
resolved config. API keys never land there: only the config and the versions
are recorded, never the process environment.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from agentrl import health, metrics_log
from agentrl.progress import TrainProgress
from agentrl.run_folder import as_container

log = logging.getLogger(__name__)

PACKAGES = (
    "agentrl",
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "peft",
    "hydra-core",
    "omegaconf",
    "gem-llm",
    "reasoning-gym",
    "numpy",
    "tokenizers",
    "wandb",
    "vllm",
    "alfworld",
    "textworld",
    "scienceworld",
)


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_revision(where: Path | None = None) -> str | None:
    """The checkout's commit (with '-dirty' for local changes), or None outside git."""
    cwd = str(where or Path(__file__).resolve().parent)
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def record_run(run_dir: Path, cfg: Any) -> dict:
    """Write run.json and config.yaml (resolved) into the run folder."""
    from omegaconf import OmegaConf

    run_dir.mkdir(parents=True, exist_ok=True)
    info = {
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_revision": git_revision(),
        "packages": package_versions(),
        "config": as_container(cfg),
    }
    (run_dir / "run.json").write_text(json.dumps(info, indent=2))
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return info


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Tracker:
    """Logs one dict of namespaced metrics per iteration to every sink."""

    def __init__(
        self, run_dir: Path, cfg: Any, total_iterations: int, group: str | None = None, job_name: str | None = None
    ):
        self.run_dir = run_dir
        # what the run logged so far (a resumed run's kept records): the history the health warnings read
        self.records: list[dict[str, Any]] = metrics_log.read_records(run_dir)
        self.metrics_file = metrics_log.open_for_append(run_dir)
        self.started = time.time()
        self.wandb_run = self._start_wandb(cfg, group, job_name)
        self.progress = TrainProgress(total_iterations) if cfg.logger.progress else None
        self.last: dict[str, float] = {}
        self.heldout_at: int | None = None  # the iteration of the latest held-out evaluation

    def _start_wandb(self, cfg: Any, group: str | None, job_name: str | None):
        mode = str(cfg.logger.wandb_mode)
        if mode == "disabled":
            return None
        import wandb

        if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _has_netrc_key()):
            log.warning("logger.wandb_mode=online but no W&B credentials were found; logging offline instead")
            mode = "offline"
        try:
            return wandb.init(
                project=cfg.logger.project,
                entity=cfg.logger.entity,
                group=cfg.logger.group or group,
                name=job_name,
                dir=str(self.run_dir),
                mode=mode,
                config=as_container(cfg),
                reinit="finish_previous",
            )
        except Exception as err:  # W&B must never take a run down
            log.warning("W&B could not start (%s); metrics still go to metrics.jsonl", err)
            return None

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        record = {"iteration": iteration, "time/elapsed_s": round(time.time() - self.started, 3)}
        record.update({k: (float(v) if _finite(v) else None) for k, v in metrics.items() if v is not None})
        metrics_log.write_record(self.metrics_file, record)
        self.records.append(record)
        for line in health.warnings_at(self.records):  # why the run may not be learning, once when it starts
            log.warning(line)
        self.last.update({k: v for k, v in record.items() if v is not None})
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in record.items() if v is not None}, step=iteration)
        if record.get("eval/success") is not None:
            self.heldout_at = iteration
        if self.progress is not None:
            self.progress.update(
                iteration, self.last.get("rollout/success"), self.last.get("eval/success"), self.heldout_at
            )

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None
        self.metrics_file.close()


class NullTracker:
    """What ranks other than 0 log to: nothing (rank 0 logs the reduced metrics once)."""

    last: dict[str, float] = {}

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def _has_netrc_key() -> bool:
    netrc = Path.home() / ".netrc"
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")
