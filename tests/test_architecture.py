"""The codebase keeps its shape: import layers, module size, and citations that stay inside the repo.

The layers are those of docs/architecture.md ("Import layers"): a module imports only from its own
layer or the layers before it. Every import statement counts, the lazy ones inside functions too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "agentrl"

# docs/architecture.md, "Import layers": the first layer is the lowest
LAYERS = [
    {
        "errors",
        "cache",
        "ranks",
        "cpu",
        "fused_head",
        "checkpoints",
        "run_folder",
        "metrics_log",
        "hydra_paths",
        "progress",
        "health",
        "tracking",
        "registry_models",
    },
    {"algos"},
    {"report"},
    {"envs", "examples"},
    {"rollout"},
    {"config"},
    {"models"},
    {"memory"},
    {"evaluation"},
    {"train"},
    {"cli"},
]
MAX_LINES = 400
REASON = re.compile(r"^Over 400 lines: ", re.M)


def layer_of(unit: str) -> int:
    for index, units in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(f"agentrl.{unit} is in no layer of docs/architecture.md; add it there and here")


def unit_of(module: str) -> str | None:
    """`agentrl.train.trainer` -> `train`; `agentrl` itself -> None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "agentrl" and len(parts) > 1 else None


def imported_modules(path: Path) -> set[str]:
    """Every agentrl module the file imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("agentrl"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentrl"):
            if node.module == "agentrl":  # `from agentrl import metrics_log`: each name is a module
                found.update(f"agentrl.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return found


def source_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_imports_a_higher_layer(path):
    unit = unit_of(".".join(path.relative_to(REPO).with_suffix("").parts))
    if unit is None or unit == "__init__":
        return
    own = layer_of(unit)
    upward = [m for m in imported_modules(path) if unit_of(m) and layer_of(unit_of(m)) > own]
    assert upward == [], f"{path.relative_to(REPO)} (layer {own + 1}) imports a higher layer: {upward}"


def test_algos_import_nothing_of_agentrl_but_algos():
    for path in (PACKAGE / "algos").glob("*.py"):
        others = [m for m in imported_modules(path) if not m.startswith("agentrl.algos")]
        assert others == [], f"{path.name} imports {others}"


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_a_long_module_states_why_at_its_top(path):
    lines = len(path.read_text().splitlines())
    if lines <= MAX_LINES:
        return
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert REASON.search(docstring), f"{path.relative_to(REPO)} has {lines} lines and no 'Over 400 lines: <why>'"


def tracked_text_files() -> list[Path]:
    suffixes = {".py", ".yaml", ".md", ".toml", ".txt", ".cfg"}
    roots = [REPO / "agentrl", REPO / "conf", REPO / "scripts", REPO / "tests", REPO / "docs"]
    files = [p for root in roots if root.is_dir() for p in root.rglob("*") if p.suffix in suffixes]
    return [*files, REPO / "README.md", REPO / "pyproject.toml", REPO / ".ci" / "run"]


def test_citations_point_to_files_in_the_repo():
    outside = re.compile(r"\b(DESIGN|ALGORITHMS|ENVIRONMENTS|STYLE)\.md\b|\.\./shared\b")
    cited = re.compile(r"\bdocs/([\w.-]+\.md)")
    problems = []
    for path in tracked_text_files():
        if "__pycache__" in path.parts or path == Path(__file__):
            continue
        text = path.read_text(errors="replace")
        for match in outside.finditer(text):
            problems.append(f"{path.relative_to(REPO)} cites {match.group(0)}, which is not in the repo")
        for name in cited.findall(text):
            if not (REPO / "docs" / name).is_file():
                problems.append(f"{path.relative_to(REPO)} cites docs/{name}, which does not exist")
    assert problems == []
