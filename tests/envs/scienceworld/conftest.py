"""Shared by the ScienceWorld tests: skip without the extra or without a Java runtime."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.extras import skip_without


@pytest.fixture(scope="session")
def scienceworld_engine():
    """Skips, with the install line, unless the scienceworld extra and a Java runtime are both here."""
    skip_without("scienceworld", "scienceworld")
    if shutil.which("java") is None:
        pytest.skip("needs a Java runtime: apt-get install default-jre-headless")


def java_descendants(root: int) -> list[int]:
    """The JVMs among the descendants of process `root` (read from /proc)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
        names[int(entry.name)] = name
    found = []
    for pid in parents:
        p = pid
        while p in parents and p not in (0, 1):
            p = parents[p]
            if p == root:
                if names[pid] == "java":
                    found.append(pid)
                break
    return sorted(found)


def own_jvms() -> list[int]:
    return java_descendants(os.getpid())
