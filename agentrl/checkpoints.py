"""The checkpoint layout: file names, publishing checkpoints whole, finding one to resume from, and telling a
complete one from a partial one.

Every file name of a run's checkpoints is defined here and nowhere else. This module sits below both
training and evaluation (it imports nothing of agentrl but `errors`).

A checkpoint folder is complete when every file the resume reads is there and
readable. `agentrl_state.json` is written last (after TRL/transformers wrote the
model, optimizer, scheduler, RNG states and trainer state), so a folder without
it was cut off mid-save. Nothing is unpickled here: the model's safetensors
header is opened with safetensors, and JSON is JSON.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from agentrl.errors import UserError

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"  # <run>/checkpoints/
LAST = "last"  # <run>/checkpoints/last -> checkpoint-<k>, the newest complete one
STAGING = ".staging"  # where a checkpoint is written before it is renamed into place
AGENTRL_STATE = "agentrl_state.json"  # rank 0's sampler, replay buffer and entropy history; written last
TRAINING_CONFIG = "agentrl_config.yaml"  # the resolved config of the run that wrote the checkpoint
MODEL_CONFIG = "config.json"
ADAPTER_CONFIG = "adapter_config.json"
MODEL_CONFIGS = (MODEL_CONFIG, ADAPTER_CONFIG)  # a full model, or a LoRA adapter
TRAINER_STATE = "trainer_state.json"
# The optimizer's state: "optimizer.pt", or accelerate's gathered one from an FSDP run (FULL_STATE_DICT)
OPTIMIZER_STATES = ("optimizer.pt", "optimizer.bin")
REQUIRED = ((TRAINER_STATE,), OPTIMIZER_STATES, ("scheduler.pt",), (AGENTRL_STATE,))  # one file of each entry
_STEP = re.compile(r"checkpoint-(\d+)$")


def checkpoint_name(step: int) -> str:
    return f"checkpoint-{step}"


def agentrl_state_file(checkpoint: Path, rank: int = 0) -> Path:
    """agentrl_state.json for rank 0 (the one a checkpoint's completeness is judged by); one file per other rank."""
    return checkpoint / (AGENTRL_STATE if rank == 0 else f"agentrl_state_rank{rank}.json")


def saved_iteration(checkpoint: Path) -> int:
    """The iteration a complete checkpoint was written after."""
    return int(json.loads(agentrl_state_file(checkpoint).read_text())["iteration"])


def staging_root(root: Path, clear: bool = False) -> Path:
    """Where a checkpoint is written before it is published; `clear` drops what a killed save left there."""
    staging = root / STAGING
    if clear:
        shutil.rmtree(staging, ignore_errors=True)
    return staging


def publish(staged: Path, root: Path, keep_last: int | None) -> Path:
    """Rename a fully written checkpoint into `root`, keep the newest `keep_last`, and point `root/last` at it."""
    from transformers.trainer import rotate_checkpoints

    folder = root / staged.name
    if folder.exists():
        shutil.rmtree(folder)
    os.rename(staged, folder)  # complete or absent: never half a checkpoint under its real name
    # transformers warns that "mtime may not be reliable" whenever the checkpoints were written within a second of
    # each other (any fast run) and then orders them by number, which checkpoint-N names mean anyway: nothing a user
    # can act on, so that one logger is kept to errors while it rotates
    rotation_log = logging.getLogger("transformers.trainer_utils")
    level = rotation_log.level
    rotation_log.setLevel(logging.ERROR)
    try:
        rotate_checkpoints(output_dir=str(root), save_total_limit=keep_last, use_mtime=True)
    finally:
        rotation_log.setLevel(level)
    link, tmp = root / LAST, root / f".{LAST}.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(folder.name)
    os.replace(tmp, link)  # atomic: `last` always names a complete checkpoint
    return folder


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under a folder (what one more checkpoint like it needs on disk)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def problem(folder: Path) -> str | None:
    """Why this checkpoint cannot be resumed from, or None when it can."""
    missing = [
        " or ".join(names) for names in (MODEL_CONFIGS, *REQUIRED) if not any((folder / n).is_file() for n in names)
    ]
    if missing:
        return f"missing {', '.join(missing)}"
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        return "no model weights (*.safetensors)"
    try:
        from safetensors import safe_open

        for path in weights:
            with safe_open(str(path), framework="pt") as f:
                f.keys()
        for name in (TRAINER_STATE, AGENTRL_STATE):
            json.loads((folder / name).read_text())
    except Exception as err:  # any unreadable file makes the checkpoint unusable, whatever the library says
        return f"unreadable ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else 'corrupt'})"
    return None


def step_of(folder: Path) -> int:
    match = _STEP.search(folder.name)
    return int(match.group(1)) if match else -1


def latest_complete(checkpoints: Path) -> Path | None:
    """The newest complete checkpoint-<k> under `checkpoints`; incomplete ones are skipped with one line each."""
    if not checkpoints.is_dir():
        return None
    for folder in sorted(checkpoints.glob("checkpoint-*"), key=step_of, reverse=True):
        why = problem(folder)
        if why is None:
            return folder
        log.warning("skipping checkpoint %s: %s", folder, why)
        print(f"skipping checkpoint {folder}: {why}")
    return None


def resume_checkpoint(resume: str | None, run_dir: Path) -> Path | None:
    """What `trainer.resume` points at: None (start fresh), "auto" (this run folder's newest complete
    checkpoint, or a fresh start when there is none), or a checkpoint or run folder."""
    if resume is None:
        return None
    if resume == "auto":
        found = latest_complete(run_dir / CHECKPOINTS)
        if found is None:
            print(
                f"trainer.resume=auto: no complete checkpoint in {run_dir / CHECKPOINTS}; starting from the beginning"
            )
        return found
    path = Path(resume).expanduser()
    if not path.exists():
        raise UserError(f"trainer.resume={resume}: no such checkpoint or run folder")
    if _STEP.search(path.resolve().name):
        why = problem(path)
        if why is not None:
            raise UserError(f"trainer.resume={resume}: the checkpoint cannot be resumed from: {why}")
        return path.resolve()
    found = latest_complete(path / CHECKPOINTS) or latest_complete(path)
    if found is None:
        raise UserError(f"trainer.resume={resume}: no complete checkpoint under it")
    return found
