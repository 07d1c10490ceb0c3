"""Where agentrl keeps what it builds once and reuses (tiny models, synthetic ALFWorld games).

`$AGENTRL_CACHE`, else `~/.cache/agentrl`; a config's own `cache_dir` wins over both. A low-level
module, so that environments and models can both find the cache without importing each other.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from agentrl.errors import UserError


def cache_root(cache_dir: str | None = None) -> Path:
    base = cache_dir or os.environ.get("AGENTRL_CACHE") or Path.home() / ".cache" / "agentrl"
    return Path(base).expanduser()


def make_cache_folder(path: Path) -> Path:
    """Create `path` (a folder in the cache) if needed and check that agentrl can write there; a cache that is a file,
    read-only or full is one line naming the folder and the variable that moves it, before anything is built."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):  # root writes into folders whose permissions say no: try it
            pass
    except OSError as err:
        raise UserError(
            f"cannot write agentrl's cache folder {path} ({err.strerror or err}); "
            "set AGENTRL_CACHE (or the config's cache_dir) to a folder agentrl may write"
        ) from None
    return path
