"""Stopping a run on a signal within a scheduler's grace period: write a checkpoint, say where it stopped and how
to resume.

- SIGINT (Ctrl-C) or SIGTERM (a scheduler's warning) during an iteration's rollout (generation, scoring, the old
  and reference log-probs) abandons the rollout: the model has not changed since the iteration began, so the run
  puts back the state the iteration began with (RNG, task sampler, replay buffer, entropy history) and writes the
  checkpoint of the iteration before at once (or points at it when it is already on disk). Slurm sends SIGKILL a
  short grace period after its warning, and a rollout of a real model takes minutes: finishing it would lose it.
- The same signal during the update (its optimizer steps, then any held-out evaluation) lets the update finish,
  then writes that iteration's checkpoint: an update's steps take seconds to minutes, and the new weights are
  worth keeping. An evaluation due at that iteration (trainer.eval_every, or the last iteration) runs before the
  checkpoint, so that the resumed run logs what an uninterrupted one does; the acknowledgement says so, and so
  does a line when it starts (it can take minutes: keep it inside the scheduler's grace period, or lower
  eval.num_tasks).
- Either way the run ends with one line (where it stopped, the command that resumes it) and the conventional
  exit code, 128 + the signal's number (130, 143); the acknowledgement printed when the signal arrives says
  which of the two is happening. A second SIGINT stops at once: the last complete checkpoint
  is intact, since checkpoints are published whole (agentrl/checkpoints.py). A repeated SIGTERM changes nothing:
  the stop is already under way (Slurm and torchrun repeat theirs).
- Under submitit (hardware=slurm), its preemption and time-out signal (USR2 by default) stops the run the same
  way, and then goes on to submitit's own handler, which requeues the job (its launcher adds
  trainer.resume=auto to the requeued job:
  hydra_plugins/agentrl_requeue).
- With several ranks, the process that launched them (train/distributed.py) takes the signal and writes
  STOP_FILE into the run folder; every rank looks for it, or for a signal of its own, at the end of each
  lockstep turn of a rollout and at the end of each iteration, and all ranks agree (any rank's request stops them
  all) so that they abandon the same rollout or stop after the same iteration.
  A rank also stops at once when that launching process has gone (SIGKILL), so that no rank outlives it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from agentrl.errors import Stopped

SETUP, ROLLOUT, UPDATE = "setup", "rollout", "update"  # the phases a stop treats differently
EVALUATION = "evaluation"  # an iteration's held-out evaluation: part of its update, said apart
STOP_FILE = ".stop-request"  # <run>/.stop-request: the launching process asks the ranks to stop
LAUNCHER_PID = "AGENTRL_LAUNCHER_PID"  # set for the ranks: the process whose death ends them


def exit_code(signum: int) -> int:
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def preemption_signal() -> int | None:
    """submitit's preemption and time-out signal when this process is a submitit job, else None."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), None)


def resume_command(overrides: Sequence[str], run_dir: Path) -> str:
    """`agentrl train <the job's overrides> hydra.run.dir=<run_dir> trainer.resume=auto`, quoted only where Hydra
    or the shell needs it (`hydra.run.dir=outputs/run` stays as a person would type it)."""
    import shlex

    from agentrl.hydra_paths import hydra_value

    kept = [o for o in overrides if not o.lstrip("+~").startswith(("trainer.resume=", "hydra.run.dir="))]
    args = [*kept, f"hydra.run.dir={hydra_value(str(run_dir))}", "trainer.resume=auto"]
    return "agentrl train " + " ".join(shlex.quote(a) for a in args)


def stop_line(signum: int, completed: int, total: int, checkpoint: Path | None, command: str, abandoned: bool) -> str:
    """The one line a stopped run ends with: where it stopped, its checkpoint, and the command that goes on.

    `completed` iterations are in the checkpoint; `abandoned`: the rollout of the next one was dropped."""
    name = signal_name(signum)
    if checkpoint is None:  # the first iteration's rollout: nothing has been learned yet
        return f"stopped on {name} during the first iteration's rollout (nothing to save yet); start again: {command}"
    dropped = f" (the rollout of iteration {completed + 1} was abandoned)" if abandoned else ""
    return (
        f"stopped on {name} after iteration {completed} of {total}{dropped}; checkpoint {checkpoint}; resume: {command}"
    )


def before_start_line(signum: int, command: str) -> str:
    """The line of a stop that came during the setup, before the first iteration began."""
    return f"stopped on {signal_name(signum)} before the first iteration; start again: {command}"


def at_once_line(signum: int, last_checkpoint: Path | None, command: str) -> str:
    """The line a second Ctrl-C prints as it ends the process: the last complete checkpoint is intact."""
    where = f"the last complete checkpoint is {last_checkpoint}" if last_checkpoint else "no checkpoint was written yet"
    return f"stopped at once on a second {signal_name(signum)}; {where}; resume: {command}"


class IterationAbandoned(Exception):
    """Raised out of the trainer when a stop abandoned an iteration's rollout, after the state the iteration began
    with was put back and checkpointed: `completed` iterations are in `checkpoint` (None before the first)."""

    def __init__(self, completed: int, checkpoint: Path | None):
        super().__init__(f"rollout of iteration {completed + 1} abandoned")
        self.completed, self.checkpoint = completed, checkpoint


def _say_from_handler(line: str) -> None:
    """Write a line to stderr from a signal handler. Not with print: the handler may interrupt a write to the same
    stream (the main thread's logging, or the first signal's own line when a second Ctrl-C follows at once), and
    Python's buffered streams refuse such a reentrant call with an exception, so the line would be lost. What the
    stream already holds goes first, where it can."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (RuntimeError, ValueError, OSError):
            pass  # the interrupted write holds it; the line below still goes out
    os.write(sys.stderr.fileno(), (line + "\n").encode())


class StopRequest:
    """The signal handlers of one process, from install() to uninstall(): the first SIGINT, SIGTERM (or submitit's
    signal) asks for a stop; a second SIGINT calls `at_once` and ends the process with 130."""

    def __init__(
        self,
        at_once: Callable[[int], str],
        quiet: bool = False,
        on_request: Callable[[int], None] | None = None,
        stop_file: Path | None = None,
        before_start: Callable[[int], str] | None = None,
    ):
        self.signum: int | None = None
        # the line of a stop before the first iteration: with it, the first signal in the setup (loading, the tiny
        # model's build, the first evaluation) ends the job at once, as there is nothing to save yet
        self.before_start = before_start
        self.stop_file = stop_file  # in a rank: the launching process's request (STOP_FILE)
        self.phase, self.iteration = SETUP, 0  # what the process is doing: the acknowledgement says what a stop does
        self.evaluates = False  # whether the iteration's update ends with a held-out evaluation
        self.at_once = at_once  # the line to print when a second SIGINT ends the process at once
        self.quiet = quiet  # ranks other than rank 0 say nothing
        self.on_request = on_request  # the launching process passes the request on to the ranks
        self.previous: dict[int, Any] = {}
        self.chained: Any = None  # submitit's handler for its signal, called once the checkpoint is written

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def wanted(self) -> bool:
        """A stop was asked for here, or by the process that launched the ranks."""
        return self.requested or (self.stop_file is not None and self.stop_file.exists())

    def enter(self, phase: str, iteration: int, evaluates: bool = False) -> None:
        """The trainer starts `phase` (ROLLOUT, UPDATE or EVALUATION) of `iteration` (1-based); `evaluates`: the
        iteration ends with a held-out evaluation."""
        self.phase, self.iteration, self.evaluates = phase, iteration, evaluates

    def acknowledgement(self, signum: int) -> str:
        """The line printed when the signal arrives: what the stop will do from here."""
        name, n = signal_name(signum), self.iteration
        if self.on_request is not None:  # the launching process: the ranks decide by their own phase
            what = (
                "the ranks abandon a rollout in progress, or finish an update in progress (and its held-out "
                "evaluation where one is due), then write a checkpoint"
            )
        elif self.phase == ROLLOUT and n <= 1:
            what = "abandoning the first iteration's rollout (nothing to save yet)"
        elif self.phase == ROLLOUT:
            what = f"abandoning the rollout of iteration {n} (the model has not changed), writing checkpoint-{n - 1}"
        elif self.phase == UPDATE:
            evaluation = " and its held-out evaluation" if self.evaluates else ""
            what = f"finishing the update of iteration {n}{evaluation}, then writing a checkpoint"
        elif self.phase == EVALUATION:
            what = f"finishing the held-out evaluation of iteration {n}, then writing a checkpoint"
        else:
            what = "stopping before the first iteration"
        again = "; Ctrl-C again stops at once" if signum == signal.SIGINT else ""
        return f"{name}: {what}{again}"

    def install(self) -> StopRequest:
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be set from the main thread (tests call train() elsewhere)
        signals = [signal.SIGINT, signal.SIGTERM]
        preempt = preemption_signal()
        if preempt is not None:
            signals.append(preempt)
            self.chained = signal.getsignal(preempt)
        for signum in signals:
            self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self) -> None:
        if self.signum is not None:
            # a stop is on its way out of the process (its line is printed after the job returns): a second Ctrl-C
            # in that last moment must still stop at once with its line, not raise KeyboardInterrupt somewhere
            return
        for signum, handler in self.previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self.previous = {}

    def _handle(self, signum: int, frame: Any = None) -> None:
        if self.signum is None:
            self.signum = signum
            if self.phase == SETUP and self.before_start is not None:
                raise Stopped(self.before_start(signum), exit_code(signum))
            if self.on_request is not None:
                self.on_request(signum)
            if not self.quiet:
                _say_from_handler(self.acknowledgement(signum))
            return
        if signum != signal.SIGINT:
            return  # a repeated SIGTERM (Slurm, torchrun) or preemption signal: the stop is already under way
        _say_from_handler(self.at_once(signum))
        os._exit(exit_code(signum))

    def hand_on_to_submitit(self, line: str) -> None:
        """After the checkpoint, when submitit's signal stopped the run: say where it stopped, then submitit's own
        handler requeues the job (or records why not) and exits."""
        preempt = preemption_signal()
        if self.signum is not None and self.signum == preempt and callable(self.chained):
            print(line, file=sys.stderr, flush=True)
            self.chained(self.signum, None)


class StopCallback(TrainerCallback):
    """At the end of each iteration: when a stop was asked for here or by the launching process (STOP_FILE), on
    any rank, save a checkpoint now and end the training loop."""

    def __init__(self, trainer: Any, request: StopRequest):
        self.trainer, self.request = trainer, request
        self.stopped_at: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        wanted = self.request.wanted()
        if self.trainer.accelerator.num_processes > 1:
            from agentrl.train.distributed import on_every_rank

            wanted = not on_every_rank(self.trainer.accelerator, not wanted)  # any rank's request stops them all
        if wanted and state.global_step < state.max_steps:
            control.should_save = True
            control.should_training_stop = True
            self.stopped_at = state.global_step
        return control


def stop_signal(request: StopRequest, run_dir: Path) -> int:
    """The signal that stopped the run: this process's own, else the one the launching process wrote."""
    if request.signum is not None:
        return request.signum
    try:
        return int(signal.Signals[(run_dir / STOP_FILE).read_text().strip()])
    except (OSError, KeyError, ValueError):
        return int(signal.SIGTERM)


def watch_launcher() -> None:
    """In a rank: end this process at once when the process that launched the ranks is gone (it was killed with
    SIGKILL, say), so that no rank goes on writing into a run folder that a resume may be using."""
    pid = int(os.environ.get(LAUNCHER_PID, "0") or 0)
    if pid <= 0:
        return

    def watch() -> None:
        while _alive(pid):
            time.sleep(0.25)
        os._exit(exit_code(signal.SIGKILL))

    threading.Thread(target=watch, name="agentrl-launcher-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    if os.path.isdir("/proc/self"):  # Linux: a zombie (killed, not yet reaped) has ended too
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
