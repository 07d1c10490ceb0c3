"""The wheel carries every subpackage and the Hydra configs."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    sources = [*(REPO / "agentrl").rglob("*.py"), *(REPO / "hydra_plugins").rglob("*.py")]  # and the launchers
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in sources}
    on_disk = {name for name in on_disk if "__pycache__" not in name}
    assert on_disk | {"agentrl.conf"} == listed
