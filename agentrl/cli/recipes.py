"""`agentrl recipes`: the experiments of conf/experiment/, each with its description and its status.

The recipe files are the source of truth. Their header (the comment lines above the first YAML line) opens, after
Hydra's `# @package` line, with the command that runs the recipe, then a one-line description, and somewhere in the
header a line `# status: ...` that says whether the recipe was measured to learn (and where the numbers are) or is
a reference recipe not yet reproduced. A recipe whose learning claim is measured over independent starts also gives
the commands of one start: a line `# start S ...:`, then one command a line, indented by two or more spaces after
the `#`, with `seed=S` where the start's seed goes and `<its sft model>` where the train command takes the clone's
folder; scripts/reproduce_recipe.py runs them per start.
Nothing is composed, so listing is quick and imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentrl.hydra_paths import config_dir

STATUS_PREFIX = "# status:"
NOT_STATED = "not stated"
START_PREFIX = "# start S"  # opens the commands of one start
START_SEED = "seed=S"  # in each of them: the start's seed
SFT_MODEL = "<its sft model>"  # in the train command: the folder `agentrl sft` wrote


@dataclass(frozen=True)
class Recipe:
    """One conf/experiment/<name>.yaml as its header describes it."""

    name: str  # the +experiment= value
    command: str  # the header's first line: how to run it
    description: str
    status: str  # NOT_STATED where the header has no status line
    start: tuple[str, ...] = ()  # the commands of one start (START_PREFIX's block), in order; () where none


def header_lines(path: Path) -> list[str]:
    """The comment lines at the top of a YAML file, Hydra's `# @package` directive left out."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            lines.append(line)
    return lines


def comment_text(line: str) -> str:
    return line.removeprefix("#").strip()


def read_recipe(path: Path) -> Recipe:
    """A recipe file's command, description and status, read from its header."""
    lines = header_lines(path)
    command = comment_text(lines[0]) if lines else ""
    # the description is the line after the command; a bare '#' there (a paragraph break) means there is none
    description = comment_text(lines[1]) if len(lines) > 1 else ""
    if description.lower().startswith("status:"):
        description = ""
    status = next((line[len(STATUS_PREFIX) :].strip() for line in lines if line.startswith(STATUS_PREFIX)), "")
    return Recipe(
        name=path.stem,
        command=command,
        description=description,
        status=status or NOT_STATED,
        start=start_commands(lines),
    )


def start_commands(lines: list[str]) -> tuple[str, ...]:
    """The commands of the header's `# start S` block, one an indented comment line after it; () where the header
    has no such block."""
    opening = next((i for i, line in enumerate(lines) if line.startswith(START_PREFIX)), None)
    if opening is None:
        return ()
    commands = []
    for line in lines[opening + 1 :]:
        if not line.startswith("#  "):
            break
        commands.append(comment_text(line))
    return tuple(commands)


def experiments_folder() -> Path:
    """conf/experiment of the installed package (or of the source checkout), where `+experiment=NAME` looks."""
    return config_dir() / "experiment"


def shipped_recipes(folder: Path | None = None) -> list[Recipe]:
    """Every recipe in `folder` (default: agentrl's own), by name."""
    folder = folder or experiments_folder()
    return [read_recipe(path) for path in sorted(folder.glob("*.yaml"))]


def recipe_lines(recipes: list[Recipe]) -> list[str]:
    """One plain line per recipe, for a pipe: `name: description; status: ...`."""
    return [f"{r.name}: {r.description.rstrip('.') or 'no description'}; status: {r.status}" for r in recipes]


def recipe_table(recipes: list[Recipe]):
    """The recipes as a rich table, for a terminal."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="agentrl recipes (+experiment=NAME)", title_justify="left")
    table.add_column("+experiment=", no_wrap=True)
    table.add_column("description")
    table.add_column("status")
    for recipe in recipes:
        status = escape(recipe.status)
        if recipe.status.startswith("measured"):
            status = f"[green]{status}[/]"
        elif recipe.status == NOT_STATED:
            status = f"[red]{status}[/]"
        table.add_row(recipe.name, escape(recipe.description or "no description"), status)
    return table


def how_to_run(folder: Path | None = None) -> str:
    """The closing line: where each recipe's full command and notes are."""
    folder = folder or experiments_folder()
    return (
        f"each recipe's command, sources and limits open its file, {folder}/NAME.yaml; "
        "`agentrl config +experiment=NAME` prints what it composes to"
    )
