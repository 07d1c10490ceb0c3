"""`agentrl --version`, what `agentrl train --help` says the default trains, and quick listings (no torch)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from typer.testing import CliRunner

from agentrl.cli import app
from tests.conftest import REPO


def test_version_prints_the_installed_distributions_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"agentrl {version('agentrl')}\n"


def test_version_wins_over_a_command_and_runs_nothing():
    result = CliRunner().invoke(app, ["--version", "train"])
    assert result.exit_code == 0 and result.output.startswith("agentrl ")


def test_the_console_script_prints_it_too():
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "--version"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip() == f"agentrl {version('agentrl')}", out.stderr


def test_train_help_names_the_defaults_estimator():
    from hydra import compose

    from tests.conftest import hydra_initialized

    with hydra_initialized():
        estimator = compose(config_name="train").algo.estimator
    # rich wraps the help at the console's width, which it reads from COLUMNS
    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    default_line = next(line for line in result.output.splitlines() if "embedded default" in line)
    assert {"grpo": "GRPO", "gigpo": "GiGPO"}[estimator] in default_line, default_line


def test_the_listings_and_the_version_import_no_torch():
    code = (
        "import sys; from typer.testing import CliRunner; from agentrl.cli import app\n"
        "for args in (['--version'], ['recipes'], ['models', 'list']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
