"""`agentrl eval PATH`: an existing path is the checkpoint, '=' in its name or not (a multirun's job folder)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.hydra_paths import hydra_quote


@pytest.fixture
def hydra_args(monkeypatch):
    """The arguments `agentrl eval` hands to Hydra, caught before any job runs."""
    from agentrl.cli import launch

    caught = []
    monkeypatch.setattr(launch, "run_hydra", lambda name, args, entry: caught.append((name, args)))
    return caught


def test_an_existing_folder_named_like_an_override_is_the_checkpoint(tmp_path, hydra_args):
    job = tmp_path / "multirun" / "x" / "seed=0"
    job.mkdir(parents=True)
    result = CliRunner().invoke(app, ["eval", str(job), "eval.num_tasks=4"])
    assert result.exit_code == 0, result.output
    assert hydra_args == [("eval", [f"checkpoint={hydra_quote(str(job))}", "eval.num_tasks=4"])]


def test_a_relative_path_with_an_equals_sign_is_the_checkpoint(tmp_path, monkeypatch, hydra_args):
    (tmp_path / "seed=0").mkdir()
    monkeypatch.chdir(tmp_path)
    CliRunner().invoke(app, ["eval", "seed=0"])
    assert hydra_args == [("eval", [f"checkpoint={hydra_quote('seed=0')}"])]


def test_an_override_that_is_no_path_stays_an_override(tmp_path, monkeypatch, hydra_args):
    monkeypatch.chdir(tmp_path)  # no folder named seed=0 here
    CliRunner().invoke(app, ["eval", "seed=0", "--random"])
    assert hydra_args == [("eval", ["policy=random", "seed=0"])]


def test_a_plain_checkpoint_path_is_unchanged(tmp_path, hydra_args):
    CliRunner().invoke(app, ["eval", str(tmp_path / "run")])
    assert hydra_args == [("eval", [f"checkpoint={hydra_quote(str(tmp_path / 'run'))}"])]
