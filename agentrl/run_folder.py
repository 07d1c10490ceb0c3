"""One run folder holds one run: the lock of the live run, the refusal of a second one, resume's checks.

`claim(folder, cfg)` runs when a training job starts, before anything is written into the folder:
- a live run holds `run.lock` (its process id and host); a second process is refused while that process lives,
  and takes over a lock whose process on this host is gone (a killed run does not block its folder forever);
- a folder that already holds a run (a logged iteration or a checkpoint) is refused unless the job resumes it
  (`trainer.resume`) or replaces it (`trainer.overwrite=true`, which deletes the earlier run's files first); a start
  that failed or was killed before its first iteration holds nothing to continue or lose, and the next job takes
  its place (its run.json, config.yaml and ended.json are rewritten);
- `trainer.resume=auto` on a folder whose checkpoints are all damaged is refused (restarting would write a second
  run on top of the first one's metrics); one stopped before its first checkpoint starts again in place of its
  earlier records (the line a stop prints says so: "start again");
- `record_end` writes how the run ended (`ended.json`), and `run_status` reads it back for `agentrl report`: a
  run with no such record was killed, or is still running (its lock is held);
- a resume compares the keys that give the checkpoint its meaning with the run's recorded config.yaml and
  refuses with one line that lists the differences (`MEANING`); the others may change (`MAY_CHANGE`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

from agentrl import metrics_log
from agentrl.checkpoints import CHECKPOINTS, latest_complete
from agentrl.errors import UserError

LOCK = "run.lock"
ENDED = "ended.json"  # how the run ended: finished, stopped (a signal) or crashed, at which iteration, its line
SLURM_JOB = "SLURM_JOB_ID"
# What a checkpoint means: the algorithm and its estimator, the environment and its level, the model and its shape,
# the seed, how many ranks saved it (each rank's RNG state), and how far ahead rows were generated (the checkpoint holds
# those jobs; the task stream has moved past them)
MEANING = (
    "algo.",
    "env.",
    "model.",
    "seed",
    "trainer.group_size",
    "trainer.tasks_per_iteration",
    "hardware.num_processes",
    "rollout.max_staleness",
)
# ... except what only says how the work is run
MAY_CHANGE = ("env.num_workers", "env.step_timeout_s", "env.step_latency_s")


class RunLock:
    """This process's hold on a run folder; `release` removes the lock file (only if it is still ours)."""

    def __init__(self, path: Path | None):
        self.path = path

    def release(self) -> None:
        if self.path is not None and (_holder(self.path) or ())[:2] == (os.getpid(), socket.gethostname()):
            self.path.unlink(missing_ok=True)
        self.path = None


def claim(folder: Path, cfg: Any) -> RunLock:
    """Take the folder for this job, or raise UserError saying why not and how to go on."""
    lock = _lock(folder)
    try:
        _check_earlier_run(folder, cfg)
    except BaseException:
        lock.release()
        raise
    (folder / ENDED).unlink(missing_ok=True)  # the run starting here has not ended (an earlier one's record goes)
    return lock


def _lock(folder: Path) -> RunLock:
    path = folder / LOCK
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if holder is not None and _gone(*holder):
                path.unlink(missing_ok=True)  # its process is gone (killed, or a requeued job's): the folder is free
                continue
            who = f"process {holder[0]} on {holder[1]}" if holder else "another process"
            raise UserError(
                f"{folder} is in use by a live run ({who}); wait for it to end, or start in another folder "
                f"(hydra.run.dir=...); if that run is gone, delete {path}"
            ) from None
        with os.fdopen(fd, "w") as out:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "job": os.environ.get(SLURM_JOB)}, out)
        return RunLock(path)
    raise UserError(f"{folder}: could not take {path}; delete it if no run is using the folder")


def _holder(path: Path) -> tuple[int, str, str | None] | None:
    try:
        found = json.loads(path.read_text())
        return int(found["pid"]), str(found["host"]), found.get("job")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _gone(pid: int, host: str, job: str | None) -> bool:
    """Whether the lock's process has ended: on this host, by its process id; elsewhere only a Slurm job that
    is this very job again (requeued) is known to have ended."""
    if job is not None and job == os.environ.get(SLURM_JOB):
        return True
    return host == socket.gethostname() and not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def holds_a_run(folder: Path) -> bool:
    """Whether an earlier run got somewhere here: it logged an iteration or wrote a checkpoint. A start that failed
    before its first iteration (a misspelt env.id) left only its run.json and ended.json: it does not hold the folder."""
    return bool(metrics_log.read_records(folder)) or any((folder / CHECKPOINTS).glob("checkpoint-*"))


def _check_earlier_run(folder: Path, cfg: Any) -> None:
    t = cfg.trainer
    if t.overwrite:
        if t.resume is not None:
            raise UserError("trainer.overwrite=true replaces the run that trainer.resume would continue; choose one")
        _clear(folder)
        return
    if t.resume is None:
        if holds_a_run(folder):
            raise UserError(
                f"{folder} already holds a run; continue it with trainer.resume=auto, start in another folder "
                "(hydra.run.dir=...), or replace it with trainer.overwrite=true"
            )
        return
    if t.resume == "auto":
        if not holds_a_run(folder):
            return  # nothing to resume yet: a fresh start (what a requeued job finds the first time)
        if latest_complete(folder / CHECKPOINTS) is None:
            if any((folder / CHECKPOINTS).glob("checkpoint-*")):
                raise UserError(
                    f"trainer.resume=auto: {folder} holds a run whose checkpoints are all damaged or incomplete; "
                    "start it over with trainer.overwrite=true, or start in another folder (hydra.run.dir=...)"
                )
            _clear(folder)  # stopped before its first checkpoint: it starts again, in place of its earlier records
            return
        recorded_in = folder
    else:
        path = Path(t.resume).expanduser().resolve()
        recorded_in = path.parent.parent if path.parent.name == CHECKPOINTS else path
        if holds_a_run(folder) and folder.resolve() != recorded_in.resolve():
            raise UserError(
                f"{folder} already holds a run; resume trainer.resume={t.resume} into a folder of its own "
                "(hydra.run.dir=...), or replace this one with trainer.overwrite=true"
            )
    differences = changed_meaning(recorded_in / "config.yaml", cfg)
    if differences:
        raise UserError(
            f"trainer.resume: the checkpoint was trained with other settings ({'; '.join(differences)}); "
            "resume with the run's own, or start a new run in another folder"
        )


def as_container(cfg: Any) -> dict:
    """A config (typed, config/typed.py, or composed) as plain dicts, lists and strings, interpolations resolved:
    what a record writes (run.json, W&B, the tiny model's cache key) and what resume compares."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(cfg, DictConfig):  # a dataclass; a composed node keeps its root, where `${...}` resolves
        cfg = OmegaConf.structured(cfg)
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def changed_meaning(recorded: Path, cfg: Any) -> list[str]:
    """The keys of `MEANING` whose value differs between the recorded config.yaml and `cfg`, as "key: old -> new"
    (empty where the run recorded no config: nothing to compare with)."""
    from omegaconf import OmegaConf

    if not recorded.is_file():
        return []
    try:
        before = _flat(OmegaConf.to_container(OmegaConf.load(recorded), resolve=False))
    except Exception as err:  # a damaged config.yaml: say so rather than resume blind
        raise UserError(f"trainer.resume: cannot read the run's {recorded}: {err}".splitlines()[0]) from None
    now = _flat(as_container(cfg))
    # keys in both: a run recorded before a key existed has nothing to say about it
    keys = sorted(k for k in before.keys() & now.keys() if k.startswith(MEANING) and not k.startswith(MAY_CHANGE))
    return [f"{k}: {before.get(k)} -> {now.get(k)}" for k in keys if before.get(k) != now.get(k)]


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: tree}


def _clear(folder: Path) -> None:
    """trainer.overwrite=true: the earlier run's files go; the lock stays, and the log that Hydra has already opened
    for this job (in append mode) is emptied instead."""
    for entry in folder.iterdir():
        if entry.name == LOCK:
            continue
        if entry.suffix == ".log" and entry.is_file():
            entry.write_text("")
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def record_end(folder: Path, status: str, line: str | None = None) -> None:
    """Write `ended.json`: "finished", "stopped" or "crashed", the last iteration logged, and the run's last line.
    Best effort: a full disk that crashed the run must not hide its error behind another."""
    iteration = last_iteration(metrics_log.read_records(folder))
    try:
        (folder / ENDED).write_text(json.dumps({"status": status, "iteration": iteration, "line": line}))
    except OSError:
        pass


def last_iteration(records: list[dict]) -> int | None:
    """The iteration of a run's last metrics record, None before its first."""
    return records[-1].get("iteration") if records else None


def run_status(folder: Path, records: list[dict] | None = None) -> dict:
    """{"status", "iteration", "line"}: as `record_end` wrote it; else "running" while the lock's process lives,
    or "killed" (ended without a word: SIGKILL, out of memory, a power cut). `records`: the run's metrics, where
    the caller has read them already."""
    try:
        ended = json.loads((folder / ENDED).read_text())
        if isinstance(ended, dict) and ended.get("status") in ("finished", "stopped", "crashed"):
            return {"status": ended["status"], "iteration": ended.get("iteration"), "line": ended.get("line")}
    except (OSError, ValueError):
        pass
    iteration = last_iteration(metrics_log.read_records(folder) if records is None else records)
    holder = _holder(folder / LOCK) if (folder / LOCK).is_file() else None
    live = holder is not None and not _gone(*holder)
    return {"status": "running" if live else "killed", "iteration": iteration, "line": None}
