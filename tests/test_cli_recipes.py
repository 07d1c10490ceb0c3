"""`agentrl recipes`: every shipped recipe says what it trains and whether it was measured, in its own header."""

from __future__ import annotations

import io
import re

import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.cli.recipes import (
    NOT_STATED,
    SFT_MODEL,
    START_SEED,
    header_lines,
    read_recipe,
    recipe_table,
    shipped_recipes,
)
from tests.conftest import REPO

RECIPES = shipped_recipes()
# A status says either where the learning run's numbers are (and, where it says, over how many independent starts,
# on which CPU and from how many of them the recipe learns, or RL seeds from one start), or that the recipe is a
# reference one not reproduced yet (with what was measured of it, if anything, after a semicolon).
MEASURED = re.compile(
    r"measured( over (\d+ starts?( on an? [A-Za-z ]+: learns from \d+ of them)?|\d+ RL seeds from one start))?"
    r" \(docs/benchmarks\.md#[a-z0-9-]+\)"
)
REFERENCE = re.compile(r"reference recipe, not yet reproduced(; .+ \(docs/benchmarks\.md#[a-z0-9-]+\))?")
ANCHOR = re.compile(r"docs/benchmarks\.md#([a-z0-9-]+)")


def test_the_shipped_recipes_are_listed():
    assert [r.name for r in RECIPES] == sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_every_shipped_recipe_states_its_status(recipe):
    assert recipe.status != NOT_STATED, f"conf/experiment/{recipe.name}.yaml has no '# status: ...' line"
    assert MEASURED.fullmatch(recipe.status) or REFERENCE.fullmatch(recipe.status), recipe.status


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_a_header_opens_with_its_command_then_one_line_of_description(recipe):
    assert re.match(rf"agentrl train \+experiment={re.escape(recipe.name)}\b", recipe.command), recipe.command
    assert recipe.description, f"{recipe.name}: no description on the line after the command"
    following = header_lines(REPO / "conf" / "experiment" / f"{recipe.name}.yaml")[2]
    assert following.startswith("# status:") or following == "#", "the description is one line"


def test_a_recipe_without_a_status_line_says_so(tmp_path):
    (tmp_path / "mine.yaml").write_text(
        "# @package _global_\n# agentrl train +experiment=mine\n# My own recipe.\n#\n# Notes.\nseed: 3\n"
    )
    recipe = read_recipe(tmp_path / "mine.yaml")
    assert (recipe.command, recipe.description, recipe.status) == (
        "agentrl train +experiment=mine",
        "My own recipe.",
        NOT_STATED,
    )


def test_a_start_block_gives_its_commands_in_order_and_stops_at_the_first_other_line(tmp_path):
    (tmp_path / "mine.yaml").write_text(
        "# agentrl train +experiment=mine model.path=<its sft model> seed=0\n# Mine.\n# status: measured (x)\n"
        "# start S (what seed=S seeds):\n#   agentrl sft +experiment=mine seed=S sft.episodes=5\n"
        "#   agentrl train +experiment=mine seed=S model.path=<its sft model>\n# A note, not a command.\n"
        "#   agentrl eval outputs/x\nseed: 3\n"
    )
    assert read_recipe(tmp_path / "mine.yaml").start == (
        "agentrl sft +experiment=mine seed=S sft.episodes=5",
        "agentrl train +experiment=mine seed=S model.path=<its sft model>",
    )
    (tmp_path / "bare.yaml").write_text(
        "# agentrl train +experiment=bare\n# Bare.\n#   agentrl train seed=S\nseed: 3\n"
    )
    assert read_recipe(tmp_path / "bare.yaml").start == (), "indented commands outside a start block are not a start"


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.start], ids=lambda r: r.name)
def test_a_start_is_an_sft_then_a_train_from_its_model_or_a_train_each_seeded_by_the_start(recipe):
    commands = [command.split() for command in recipe.start]
    assert [words[:2] for words in commands] in ([["agentrl", "train"]], [["agentrl", "sft"], ["agentrl", "train"]])
    assert all(START_SEED in words for words in commands)
    assert commands[-1][2] == f"+experiment={recipe.name}"
    assert (len(commands) == 2) == (f"model.path={SFT_MODEL}" in recipe.start[-1])


def test_every_measured_recipe_gives_a_start_so_that_its_row_can_be_reproduced():
    measured = {r.name for r in RECIPES if r.status.startswith("measured")}
    assert {"gem_2048", "gem_sokoban", "gem_guessthenumber", "smollm2_household_cpu"} <= measured
    assert measured == {r.name for r in RECIPES if r.start}


def test_a_header_without_a_description_reads_as_none(tmp_path):
    (tmp_path / "bare.yaml").write_text("# agentrl train +experiment=bare\n# status: measured (x)\nseed: 3\n")
    recipe = read_recipe(tmp_path / "bare.yaml")
    assert recipe.description == "" and recipe.status == "measured (x)"


def test_piped_each_recipe_is_one_plain_line():
    result = CliRunner().invoke(app, ["recipes"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for recipe in RECIPES:
        (line,) = [line for line in lines if line.startswith(f"{recipe.name}: ")]
        assert line.endswith(f"; status: {recipe.status}")
    assert "smollm2_household: RL that makes" in result.output
    assert "status: measured over 3 starts (docs/benchmarks.md#smollm2-on-household)" in result.output
    assert "not stated" not in result.output


def test_on_a_terminal_the_recipes_are_a_table():
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=300, force_terminal=True, color_system=None).print(recipe_table(RECIPES))
    text = out.getvalue()
    assert all(recipe.name in text for recipe in RECIPES) and "reference recipe, not yet reproduced" in text


def test_the_anchors_cited_are_headings_of_the_benchmarks_page():
    page = REPO / "docs" / "benchmarks.md"
    cited = {anchor for recipe in RECIPES for anchor in ANCHOR.findall(recipe.status)}
    assert cited, "no recipe cites docs/benchmarks.md"
    assert page.is_file(), "the recipes' status lines cite docs/benchmarks.md, which does not exist"
    slugs = {github_slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}
    assert cited <= slugs, f"anchors with no heading in docs/benchmarks.md: {sorted(cited - slugs)}"


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
