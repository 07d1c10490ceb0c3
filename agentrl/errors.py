"""User-facing errors: one line, non-zero exit, no traceback.

A ``UserError`` means the user can fix it (a typo, a missing file, an option that
cannot apply). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager


class UserError(Exception):
    """A mistake in the user's input, reported as one line."""

    exit_code = 2


class Stopped(BaseException):
    """A run stopped on a signal (SIGINT, SIGTERM) after writing its checkpoint: one line, which says where it
    stopped and how to resume, and the signal's conventional exit code (128 + the signal number).

    A BaseException, like KeyboardInterrupt: Hydra's job runner records an Exception as a failed job and goes on
    with the next one; a stop must end the whole command."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@contextmanager
def interrupt_says(line: str):
    """A Ctrl-C (SIGINT) inside ends the command with `line` (what stopped, what was kept) and exit code 130, where
    it would end silently. For commands that write their results only at the end (`agentrl eval`, `agentrl sft`)."""
    try:
        yield
    except KeyboardInterrupt:
        raise Stopped(line, 130) from None


def debug_enabled() -> bool:
    return os.environ.get("AGENTRL_DEBUG", "") not in ("", "0")


def fail(message: str, exit_code: int = 2) -> None:
    """Print one error line to stderr and exit."""
    first_line = " ".join(str(message).split())  # keep it to one line whatever the source said
    print(f"error: {first_line}", file=sys.stderr)
    raise SystemExit(exit_code)


@contextmanager
def user_errors():
    """Turn UserError into a one-line exit (full traceback with AGENTRL_DEBUG=1), and a stop into its line and code."""
    try:
        yield
    except UserError as err:
        if debug_enabled():
            raise
        fail(str(err), err.exit_code)
    except Stopped as stop:
        print(str(stop), file=sys.stderr, flush=True)
        raise SystemExit(stop.exit_code) from None


def first_line(message: object) -> str:
    """The first non-empty line of an error message (errors are one line here); an exception with no
    message gives its type's name."""
    text = str(message)
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    if line:
        return line
    return type(message).__name__ if isinstance(message, BaseException) else text
