"""Progress a person can follow: a rich bar on a terminal, plain lines everywhere else.

rich draws its live bar only on a terminal; under Slurm, in CI or with `agentrl train > log` it would print it
once, at the very end. So when standard output is not a terminal, progress is written as plain lines instead,
one per event, each starting with `[agentrl]` and a word saying what is going on, then `key=value` pairs, so a
log is easy to grep (`grep 'train iter='`):

    [agentrl] train starting running=0:01:00                  (a slow start: the starting model's evaluation)
    [agentrl] train start iterations=300 heldout=0.070
    [agentrl] train iter=25/300 s_per_iter=2.41 eta=0:11:02 success=0.438 heldout=0.550@25 elapsed=0:01:00
    [agentrl] train iter=26/300 running=0:01:00               (while an iteration runs longer than heartbeat_s)
    [agentrl] tiny model: warm-up step: 300/1500 (20%) elapsed=0:00:09 | loss 1.234

`Phase` (a long step of known length: a model build, game generation, an evaluation) and `TrainProgress` (the
training loop) choose the form themselves; `terminal()` says which one applies.
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import timedelta
from typing import Any, TextIO

TAG = "[agentrl]"
HEARTBEAT_S = 60.0  # in plain logs, a line at least this often while an iteration runs
MIN_GAP_S = 5.0  # in plain logs, a phase's progress lines come no more often than this (a short phase: none)


def terminal(stream: TextIO | None = None) -> bool:
    """Whether progress goes to a terminal (rich's own test: FORCE_COLOR / TTY_COMPATIBLE count)."""
    from rich.console import Console

    return Console(file=stream or sys.stdout).is_terminal


def clock(seconds: float) -> str:
    """0:01:05 for 65.3 s (whole seconds)."""
    return str(timedelta(seconds=round(max(seconds, 0.0))))


def plain_line(what: str, stream: TextIO | None = None, **fields: Any) -> None:
    """One grep-able line: `[agentrl] <what> key=value ...` (floats with 3 decimals)."""
    pairs = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in fields.items() if v is not None)
    print(f"{TAG} {what}{' ' + pairs if pairs else ''}", file=stream or sys.stdout, flush=True)


class Phase:
    """A long step of `total` units: `with Phase("generating games", 36) as phase: ... phase.advance()`.

    On a terminal, a transient rich bar. Otherwise plain lines that stay few: the `done` line at the end, with the
    time taken; before it, while the phase runs, a line at a new tenth of the way, at most one every `min_gap_s`
    (so a phase that ends within that prints only its `done` line), and one every `heartbeat_s` at least."""

    def __init__(
        self,
        description: str,
        total: int,
        stream: TextIO | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        min_gap_s: float = MIN_GAP_S,
    ):
        self.description, self.total, self.stream, self.heartbeat_s = description, max(total, 0), stream, heartbeat_s
        self.min_gap_s = min_gap_s
        self.done, self.note = 0, ""
        self._bar = self._task = None

    def __enter__(self) -> Phase:
        self.started = self._last_line = time.monotonic()
        self._next_tenth = 1
        if terminal(self.stream):
            from rich.console import Console
            from rich.progress import Progress

            self._bar = Progress(transient=True, console=Console(file=self.stream) if self.stream else None)
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total)
        return self

    def advance(self, units: int = 1, note: str = "") -> None:
        self.done += units
        self.note = note or self.note
        if self._bar is not None:
            text = f"{self.description} ({self.note})" if self.note else self.description
            self._bar.update(self._task, advance=units, description=text)
            return
        now = time.monotonic()
        tenth = self.done * 10 // max(self.total, 1)
        since = now - self._last_line
        if (tenth >= self._next_tenth and since >= self.min_gap_s) or since >= self.heartbeat_s:
            self._next_tenth = tenth + 1
            if self.done < self.total:
                self._line(now)

    def reach(self, done: int, *_: Any) -> None:
        """Advance to `done` units (`collect`'s `on_turn(turn, limit)` hook takes it as it is)."""
        self.advance(done - self.done)

    def _line(self, now: float, closing: str = "") -> None:
        self._last_line = now
        share = f" ({100 * self.done // max(self.total, 1)}%)"
        line = f"{TAG} {self.description}: {self.done}/{self.total}{share}{closing} elapsed={clock(now - self.started)}"
        print(f"{line} | {self.note}" if self.note else line, file=self.stream or sys.stdout, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif exc[0] is None:
            self.note = ""
            self._line(time.monotonic(), " done")


class TrainProgress:
    """The training loop's progress: the rich bar on a terminal; in a plain log, one line per iteration with its
    time, the ETA, rollout success and the latest held-out success, and a `running=` line every `heartbeat_s` while
    an iteration takes longer than that."""

    def __init__(self, total: int, stream: TextIO | None = None, heartbeat_s: float = HEARTBEAT_S):
        self.total, self.stream, self.heartbeat_s = total, stream, heartbeat_s
        self.started = time.monotonic()
        self.first: int | None = None  # the first iteration this process saw (a resumed run starts later)
        self.iteration = 0
        self._since = self._iteration_started = self.started  # the last line's time; the running iteration's start
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._bar = None
        if terminal(stream):
            self._bar = self._rich_bar()
        else:
            self._heartbeat = threading.Thread(target=self._beat, name="agentrl-progress", daemon=True)
            self._heartbeat.start()

    def _rich_bar(self):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        bar = Progress(
            TextColumn("[bold]train[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=Console(file=self.stream) if self.stream else None,
        )
        bar.start()
        self._task = bar.add_task("train", total=self.total, status="")
        return bar

    def update(
        self, iteration: int, success: float | None, heldout: float | None = None, heldout_at: int | None = None
    ) -> None:
        """After iteration `iteration` (0: the starting model's evaluation): rollout success, the latest held-out
        success and the iteration it was measured at."""
        if self._bar is not None:
            status = f"success {success if success is not None else float('nan'):.2f}"
            if heldout is not None:
                status += f" | held-out {heldout:.2f}"
            self._bar.update(self._task, completed=iteration, status=status)
            return
        with self._lock:
            now = time.monotonic()
            if self.first is None:  # the first line of this process; a resumed run starts at its checkpoint
                self.first = iteration if iteration == 0 else iteration - 1
                self.started = now if iteration == 0 else self.started
            self.iteration, self._since, self._iteration_started = iteration, now, now
            if iteration == 0:
                plain_line("train start", self.stream, iterations=self.total, heldout=heldout)
                return
            per_iteration = (now - self.started) / max(iteration - self.first, 1)
            fields: dict[str, Any] = {
                "iter": f"{iteration}/{self.total}",
                "s_per_iter": f"{per_iteration:.2f}",
                "eta": clock(per_iteration * (self.total - iteration)),
                "success": success,
            }
            if heldout is not None:
                fields["heldout"] = f"{heldout:.3f}@{heldout_at}"
            fields["elapsed"] = clock(now - self.started)
            plain_line("train", self.stream, **fields)

    def _beat(self) -> None:
        while not self._closed.wait(min(self.heartbeat_s, 5.0)):
            with self._lock:
                now = time.monotonic()
                if now - self._since >= self.heartbeat_s:
                    running = clock(now - self._iteration_started)
                    if self.first is None:  # before the first line: the setup or the starting model's evaluation
                        plain_line("train starting", self.stream, running=running)
                    else:
                        plain_line("train", self.stream, iter=f"{self.iteration + 1}/{self.total}", running=running)
                    self._since = now

    def close(self) -> None:
        self._closed.set()
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
