"""The trainer's checkpoint hooks: agentrl's state beside TRL's, written into a staging folder and published whole.

A mixin of `AgentTrainer` (agentrl/train/trainer.py), in front of TRL's GRPOTrainer: it overrides
transformers' `_save_checkpoint`, `_get_output_dir` and `_load_optimizer_and_scheduler`. Names and the
publishing steps live in agentrl/checkpoints.py.

A save that fails part-way (a full disk, an I/O error) removes its staging folder, so the previous complete
checkpoint stays the newest; a full disk stops the run with one line that names the folder and the space a
checkpoint needs. transformers' `training_args.bin` (a pickle of TrainingArguments that nothing reads back: the
run's config is agentrl_config.yaml, and resuming reads only the state files) is not written.
"""

from __future__ import annotations

import copy
import errno
import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from agentrl.checkpoints import (
    LAST,
    TRAINING_CONFIG,
    agentrl_state_file,
    checkpoint_name,
    folder_bytes,
    publish,
    staging_root,
)
from agentrl.errors import UserError

TRAINING_ARGS = "training_args.bin"  # transformers' pickle of its TrainingArguments, left out


class CheckpointHooks:
    saved_iteration: int | None = None  # the iteration of the newest checkpoint this run wrote or resumed from

    def agentrl_state(self) -> dict[str, Any]:
        """What TRL's checkpoint lacks: the task stream position, the replay buffer and the entropy history."""
        return {
            "iteration": self.state.global_step,
            "sampler": self.sampler.state_dict(),
            "replay": self.replay.state_dict() if self.replay is not None else None,
            "entropy": self.entropy_reg.state_dict() if self.entropy_reg is not None else None,
        }

    def load_agentrl_state(self, checkpoint: Path) -> None:
        """Restore this rank's agentrl state from a checkpoint folder."""
        state = json.loads(agentrl_state_file(checkpoint, self.accelerator.process_index).read_text())
        self._load_agentrl_parts(state)
        self.load_async_rollouts(checkpoint)
        self.saved_iteration = int(state["iteration"])

    def _load_agentrl_parts(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        for name, part in (("replay", self.replay), ("entropy", self.entropy_reg)):
            if part is not None and state.get(name) is not None:
                part.load_state_dict(state[name])

    # ------------------------------------------------------------------ a stop during a rollout

    def iteration_start(self) -> dict[str, Any]:
        """What an iteration's rollout changes before the model does: the RNG streams (sampling) and agentrl's
        state (the task sampler's position, the replay buffer), copied so that a stop can put them back."""
        return {"rng": rng_states(), "agentrl": copy.deepcopy(self.agentrl_state())}

    def checkpoint_iteration_start(self, start: dict[str, Any]) -> Path | None:
        """After a stop abandoned an iteration's rollout: put back the state the iteration began with and make sure
        the previous iteration's checkpoint is on disk (written now unless this run already wrote or resumed from
        it). The model and optimizer have not changed since, so it equals the checkpoint that iteration would have
        written. None before the first iteration: there is nothing to save."""
        set_rng_states(start["rng"])
        self._load_agentrl_parts(start["agentrl"])
        self.iteration_metrics = {}
        completed = self.state.global_step
        if completed == 0:
            return None
        if self.saved_iteration != completed:  # decided alike on every rank: the save is collective
            self._save_checkpoint(self.model, trial=None)
        return Path(self.args.output_dir) / checkpoint_name(completed)

    def _get_output_dir(self, trial):
        staging = getattr(self, "_staging_root", None)
        return str(staging) if staging is not None else super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial):
        """TRL/transformers write the checkpoint into a staging folder; it is renamed into place when complete.

        With several ranks, each rank writes its own RNG state and agentrl state there, and rank 0
        publishes once every rank has finished writing (checkpoints are written once). A write that fails
        removes the staged folder; a full disk is a one-line stop (see `_disk_full`)."""
        root = Path(self._get_output_dir(trial=trial))
        staged = staging_root(root) / checkpoint_name(self.state.global_step)
        try:
            with _without_training_args():
                self._write_checkpoint(model, trial, root)
        except (OSError, RuntimeError) as err:  # torch.save reports a failed write as a RuntimeError
            shutil.rmtree(staged, ignore_errors=True)
            if _is_disk_full(err):
                raise self._disk_full(root, err) from None
            raise
        self.saved_iteration = self.state.global_step

    def _disk_full(self, root: Path, err: BaseException) -> UserError:
        """One line: which folder is full, how much a checkpoint needs there, and what is still intact."""
        last = root / LAST
        if last.exists():
            needed, kept = folder_bytes(last.resolve()), f"the previous checkpoint {last.resolve()} is intact"
        else:  # no checkpoint yet: the weights, and the optimizer's two moments per weight
            weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
            needed, kept = 3 * weights, "no earlier checkpoint exists"
        free = shutil.disk_usage(root).free if root.exists() else 0
        resume = getattr(self, "resume_command", None)
        return UserError(
            f"no space left in {root} for {checkpoint_name(self.state.global_step)} "
            f"(a checkpoint needs about {_size(needed)}, {_size(free)} free); the partial checkpoint was removed and "
            f"{kept}" + (f"; free some space, then resume: {resume}" if resume else "")
        )

    def _write_checkpoint(self, model, trial, root: Path) -> None:
        from omegaconf import OmegaConf

        self._staging_root = staging_root(root, clear=self.args.should_save)
        self.accelerator.wait_for_everyone()  # nobody writes into the staging folder before rank 0 has cleared it
        try:
            super()._save_checkpoint(model, trial)  # into .staging/checkpoint-<k>, via _get_output_dir
        finally:
            self._staging_root = None
        staged = staging_root(root) / checkpoint_name(self.state.global_step)
        staged.mkdir(parents=True, exist_ok=True)
        agentrl_state_file(staged, self.accelerator.process_index).write_text(
            json.dumps(self.agentrl_state(), indent=2)
        )
        self.save_async_rollouts(staged)  # the rows generated ahead and not yet trained on (rollout.max_staleness)
        self.accelerator.wait_for_everyone()
        if not self.args.should_save:
            return
        (staged / TRAINING_CONFIG).write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
        if self.cfg.model.lora.enabled and self.cfg.model.lora.merge_on_save:
            from agentrl.models.lora import merge_on_save

            merge_on_save(staged)  # <checkpoint>/merged/: a plain model that loads without PEFT
        publish(staged, root, keep_last=self.args.save_total_limit)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """transformers maps the optimizer state onto args.device, which on several CPU ranks is `cpu:<rank>`:
        a location torch.load cannot restore ("don't know how to restore data location ... cpu:0").
        Map it onto plain "cpu" there; everything else is transformers' own loading."""
        if checkpoint is None or self.args.device.type != "cpu" or self.args.world_size == 1:
            return super()._load_optimizer_and_scheduler(checkpoint)
        from unittest import mock

        load = torch.load

        def load_on_cpu(*args, **kwargs):
            kwargs["map_location"] = "cpu"
            return load(*args, **kwargs)

        with mock.patch("torch.load", load_on_cpu):
            return super()._load_optimizer_and_scheduler(checkpoint)


@contextmanager
def _without_training_args():
    """transformers' save writes `torch.save(self.args, .../training_args.bin)`; skip that one file."""
    from unittest import mock

    save = torch.save

    def save_but_training_args(obj, f, *args, **kwargs):
        if isinstance(f, (str, Path)) and Path(f).name == TRAINING_ARGS:
            return None
        return save(obj, f, *args, **kwargs)

    with mock.patch("torch.save", save_but_training_args):
        yield


def rng_states() -> dict[str, Any]:
    """Every RNG stream transformers saves in a checkpoint (`Trainer._save_rng_state`): Python, numpy, torch, CUDA."""
    import random

    import numpy as np

    states = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    import random

    import numpy as np

    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["cpu"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def _is_disk_full(err: BaseException) -> bool:
    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    text = str(err)
    return "No space left" in text or "file write failed" in text  # torch's zip writer says only this


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
