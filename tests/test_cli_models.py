"""`agentrl models list`: every model= choice, and where its weights come from."""

from __future__ import annotations

import io

from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.cli.model_choices import BUILT, HUB, REGISTRY, choice_table, model_choices
from agentrl.registry_models import REGISTRY_MODELS
from tests.conftest import REPO

MODEL_FILES = sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml"))


def test_every_model_choice_is_listed_with_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))
    choices = {choice.name: choice for choice in model_choices()}
    assert sorted(choices) == MODEL_FILES
    assert choices["tiny"].source == BUILT
    assert {name for name, c in choices.items() if c.source == REGISTRY} == set(REGISTRY_MODELS)
    assert (
        choices["qwen2.5-7b-instruct"].source == HUB
        and choices["qwen2.5-7b-instruct"].weights == "Qwen/Qwen2.5-7B-Instruct"
    )


def test_piped_a_line_each_with_the_registry_package_and_its_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))
    result = CliRunner().invoke(app, ["models", "list"])
    assert result.exit_code == 0, result.output
    lines = {line.split(":", 1)[0]: line for line in result.output.splitlines()}
    assert sorted(lines) == MODEL_FILES
    spec = REGISTRY_MODELS["smollm2-135m-instruct"]
    registry = lines["smollm2-135m-instruct"]
    assert f"package registry: {spec.package}=={spec.version} ({spec.wheel_mb} MB)" in registry
    assert spec.origin in registry and "not fetched yet (agentrl models fetch smollm2-135m-instruct)" in registry
    assert "built locally" in lines["tiny"] and "nothing to download" in lines["tiny"]
    hub = lines["qwen2.5-0.5b-instruct"]
    assert "Hugging Face hub" in hub and "needs network, or a local copy: model.path=<folder>" in hub


def test_a_cached_registry_model_says_where(tmp_path, monkeypatch):
    from agentrl import registry_models

    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))
    folder = registry_models.model_folder("smollm2-135m-instruct")
    folder.mkdir(parents=True)
    (folder / registry_models.DONE_FILE).write_text("{}")
    result = CliRunner().invoke(app, ["models", "list"])
    assert f"cached in {folder}" in result.output


def test_on_a_terminal_the_choices_are_a_table(tmp_path, monkeypatch):
    from rich.console import Console

    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))
    out = io.StringIO()
    Console(file=out, width=300, force_terminal=True, color_system=None).print(choice_table(model_choices()))
    assert all(name in out.getvalue() for name in MODEL_FILES)
