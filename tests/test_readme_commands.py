"""Every `agentrl train|config|sft|eval` command line that README.md prints in a code block, and every one in a
conf/experiment/*.yaml header comment, composes: Hydra's compose and agentrl's checks, in-process, through the
same preflight as `agentrl config` and `agentrl train` (agentrl/cli/launch.py), so a documented command stays true.

How a line is read:
- a README line may hold several commands joined by `&&` (the Quickstart's); each `agentrl ...` part counts;
- a trailing `# comment`, and in a header a trailing `(remark)` or `[remark]` after the command, are not part of it;
- a placeholder inside a value (`model.path=outputs/sft/<date>/<time>/model`) is replaced by a plain word, as it
  names a folder that only a user's run makes; nothing is loaded, so the folder need not exist;
- a recipe's start commands (agentrl/cli/recipes.py) take `seed=S`, the start's seed: it is read as seed=0;
- `agentrl eval CHECKPOINT` passes the checkpoint as `checkpoint=`, and `--random` as `policy=random`, and a recipe
  (`+experiment=NAME`) or a model (`model=NAME`) is composed as training's and handed over as `recipe_config=`, as
  the CLI does; `-m` composes as a multirun (every value of every sweep is checked), other Hydra flags are left out.
Skipped, each with its reason in the test id: a line whose whole word is a placeholder standing for overrides
(`agentrl train <the run's overrides> ...`), which is not a command until the user fills it in.
Lines that use `env=gym` or `env=gem` xfail while conf/env/<name>.yaml is not in the tree.
"""

from __future__ import annotations

import re
import shlex

import pytest

from agentrl.cli.recipes import START_SEED
from tests.conftest import REPO

COMMANDS = ("train", "config", "sft", "eval")
COMMAND = re.compile(rf"^agentrl ({'|'.join(COMMANDS)})\b")
PLACEHOLDER = re.compile(r"<[^<>]*>")
BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)


def readme_lines() -> list[tuple[str, str]]:
    """(where, command) for every agentrl command in README.md's code blocks."""
    found = []
    for block in BLOCK.findall((REPO / "README.md").read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                part = part.strip()
                if COMMAND.match(part):
                    found.append(("README.md", part))
    return found


def header_lines() -> list[tuple[str, str]]:
    """(where, command) for every agentrl command in the comment lines at the top of each recipe."""
    found = []
    for path in sorted((REPO / "conf" / "experiment").glob("*.yaml")):
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            text = re.sub(r"^#\s*(Run:\s*)?", "", line).strip()
            if COMMAND.match(text):
                text = re.split(r"\s+[(\[]", text, maxsplit=1)[0]  # a remark after the command
                found.append((f"conf/experiment/{path.name}", text))
    return found


def unique(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen, out = set(), []
    for where, line in lines:
        if line not in seen:
            seen.add(line)
            out.append((where, line))
    return out


LINES = unique(readme_lines() + header_lines())


def to_args(line: str) -> tuple[str, list[str]] | str:
    """(config name, Hydra arguments) for a command line, or the reason it is skipped."""
    words = shlex.split(PLACEHOLDER.sub("placeholder", line), comments=True)  # before: `<the run's ...>`
    words = ["seed=0" if word == START_SEED else word for word in words]
    command, words = words[1], words[2:]
    if "placeholder" in words:  # a whole word, not inside a value
        return "a placeholder stands for the user's own overrides"
    if command == "eval":
        args = []
        for word in words:
            if word == "--random":
                args.append("policy=random")
            elif "=" not in word and not word.startswith("-"):
                args.append(f"checkpoint={word}")
            else:
                args.append(word)
        return "eval", args
    return ("sft" if command == "sft" else "train"), words


def missing_env_config(args: list[str]) -> str | None:
    for arg in args:
        name = arg[4:] if arg.startswith("env=") else None
        if name in ("gym", "gem") and not (REPO / "conf" / "env" / f"{name}.yaml").is_file():
            return f"conf/env/{name}.yaml not yet present"
    return None


def test_commands_are_found():
    where = {w for w, _ in LINES}
    assert any(line == "agentrl train" for _, line in LINES), "the Quickstart's agentrl train"
    assert len([w for w in where if w.startswith("conf/experiment/")]) == len(
        list((REPO / "conf" / "experiment").glob("*.yaml"))
    ), "every recipe's header names a command"


@pytest.mark.parametrize(("where", "line"), LINES, ids=[f"{w}: {line}" for w, line in LINES])
def test_a_documented_command_composes(where, line, tmp_path):
    from agentrl.cli.eval_recipe import names_model, names_recipe, with_recipe_config
    from agentrl.cli.launch import parse_args, preflight_groups

    parsed = to_args(line)
    if isinstance(parsed, str):
        pytest.skip(parsed)
    config_name, args = parsed
    if reason := missing_env_config(args):
        pytest.xfail(reason)
    if config_name == "eval" and (names_recipe(args) or names_model(args)):
        args = with_recipe_config(args, tmp_path)
    command = parse_args(args)
    if command.parsed.cfg is None and command.flags and not command.parsed.multirun:
        raise AssertionError(f"{where}: unexpected Hydra flags {command.flags} in `{line}`")
    preflight_groups(config_name, command.overrides, command.parsed.multirun)
