"""Stopping a run on a signal: finish the iteration, write a checkpoint, say where it stopped and how to resume.

- SIGINT (Ctrl-C) or SIGTERM (a scheduler's warning): the iteration in progress finishes, a checkpoint is
  written, and the run ends with one line (where it stopped, the command that resumes it) and the conventional
  exit code, 128 + the signal's number (130, 143). A second SIGINT stops at once: the last complete checkpoint
  is intact, since checkpoints are published whole (agentrl/checkpoints.py). A repeated SIGTERM changes nothing:
  the stop is already under way (Slurm and torchrun repeat theirs).
- Under submitit (hardware=slurm), its preemption and time-out signal (USR2 by default) stops the run the same
  way, and then goes on to submitit's own handler, which requeues the job (its launcher adds
  trainer.resume=auto to the requeued job:
  hydra_plugins/agentrl_requeue).
- With several ranks, the process that launched them (train/distributed.py) takes the signal and writes
  STOP_FILE into the run folder; every rank looks for it, or for a signal of its own, at the end of each
  iteration, and all ranks agree (any rank's request stops them all) so that they stop at the same iteration.
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
    """`agentrl train <the job's overrides> hydra.run.dir=<run_dir> trainer.resume=auto`."""
    from agentrl.hydra_paths import hydra_quote

    kept = [o for o in overrides if not o.lstrip("+~").startswith(("trainer.resume=", "hydra.run.dir="))]
    args = [*kept, f"hydra.run.dir={hydra_quote(str(run_dir))}", "trainer.resume=auto"]
    return "agentrl train " + " ".join(_shell_quote(a) for a in args)


def _shell_quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


class StopRequest:
    """The signal handlers of one process, from install() to uninstall(): the first SIGINT, SIGTERM (or submitit's
    signal) asks for a stop; a second SIGINT calls `at_once` and ends the process with 130."""

    def __init__(
        self,
        at_once: Callable[[int], str],
        quiet: bool = False,
        on_request: Callable[[int], None] | None = None,
    ):
        self.signum: int | None = None
        self.at_once = at_once  # the line to print when a second SIGINT ends the process at once
        self.quiet = quiet  # ranks other than rank 0 say nothing
        self.on_request = on_request  # the launching process passes the request on to the ranks
        self.previous: dict[int, Any] = {}
        self.chained: Any = None  # submitit's handler for its signal, called once the checkpoint is written

    @property
    def requested(self) -> bool:
        return self.signum is not None

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
        for signum, handler in self.previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self.previous = {}

    def _handle(self, signum: int, frame: Any = None) -> None:
        if self.signum is None:
            self.signum = signum
            if self.on_request is not None:
                self.on_request(signum)
            if not self.quiet:
                again = "; Ctrl-C again stops at once" if signum == signal.SIGINT else ""
                print(
                    f"{signal_name(signum)}: finishing the current iteration, then writing a checkpoint{again}",
                    file=sys.stderr,
                    flush=True,
                )
            return
        if signum != signal.SIGINT:
            return  # a repeated SIGTERM (Slurm, torchrun) or preemption signal: the stop is already under way
        print(self.at_once(signum), file=sys.stderr, flush=True)
        sys.stdout.flush()
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

    def __init__(self, trainer: Any, request: StopRequest, run_dir: Path):
        self.trainer, self.request, self.stop_file = trainer, request, run_dir / STOP_FILE
        self.stopped_at: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        wanted = self.request.requested or self.stop_file.exists()
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
