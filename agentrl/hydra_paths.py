"""Where agentrl's Hydra configs live (and a `--config-dir` of the user's), and how to quote a value inside a Hydra override.

It sits in the lowest import layer (docs/architecture.md, "Import layers") because both the CLI
(cli/launch.py, cli/app.py) and train/distributed.py need it, and train/ must not import the CLI.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agentrl.errors import UserError


def config_dir() -> Path:
    """conf/ in a source checkout, agentrl/conf in an installed wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "conf", here / "conf"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise UserError(
        f"agentrl's configs are missing (neither {here.parent / 'conf'} nor {here / 'conf'}); reinstall agentrl"
    )


# Characters a value may hold unquoted in a Hydra override: anything else ('=', ',', spaces, brackets, quotes, '$')
# is grammar there and needs quoting.
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./+:@%-]+")


def hydra_value(value: str) -> str:
    """A value (a path) as a Hydra override takes it: as it is where that is plain text, else quoted (in double
    quotes where it can be, so that the shell's single quotes around the whole override stay readable)."""
    if _PLAIN_VALUE.fullmatch(value):
        return value
    if '"' not in value and "\\" not in value and "${" not in value:
        return f'"{value}"'
    return hydra_quote(value)


def hydra_quote(value: str) -> str:
    """Quote a value (a path) for a Hydra override so that '=', ',' or spaces in it stay text.

    Inside Hydra's quotes a backslash is literal unless it comes before a quote or the closing quote: those
    backslashes are doubled, and the quote itself escaped."""
    escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
    escaped = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped)
    return f"'{escaped}'"


def check_writable(folder: Path, key: str) -> None:
    """Make `folder` (Hydra's run or sweep folder) and write a file in it, so that whatever stands in the way (a
    file, a parent that cannot exist, a read-only place, no permission, a name too long) is one line naming `key`,
    not a traceback."""
    try:
        existing = folder
        while not existing.exists() and existing != existing.parent:  # exists() raises on a name too long
            existing = existing.parent
        if not existing.is_dir():
            raise UserError(f"the output folder {folder} cannot be made: {existing} is a file (set {key})")
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".agentrl-write-test-{os.getpid()}"  # one per process: ranks check at the same time
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        why = err.strerror or type(err).__name__
        raise UserError(f"the output folder {folder} cannot be made or written: {why} (set {key})") from None


def with_config_dir(overrides: list[str], config_dir_flag: str | None) -> list[str]:
    """The overrides as preflight must compose them: `--config-dir DIR` is on Hydra's search path for the job (so
    `+experiment=NAME` finds DIR/experiment/NAME.yaml), and preflight composes from agentrl's own conf/ alone, so
    DIR joins `hydra.searchpath` here (at the end of a list the user gave)."""
    if not config_dir_flag:
        return overrides
    folder = Path(config_dir_flag).expanduser()
    if not folder.is_dir():
        raise UserError(f"--config-dir {config_dir_flag} is not a folder")
    entry = f"file://{folder.resolve()}"
    out, joined = [], False
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") == "hydra.searchpath" and value.strip().startswith("[") and value.strip().endswith("]"):
            inner = value.strip()[1:-1].strip()
            override = f"{key}=[{inner + ',' if inner else ''}{entry}]"
            joined = True
        out.append(override)
    return out if joined else [*out, f"hydra.searchpath=[{entry}]"]
