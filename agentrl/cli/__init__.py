"""The command line, the top layer: the Typer app and its commands (`app`), from CLI arguments to Hydra with every
override checked first (`launch`; a failed composition said in one line: `compose_errors`), and the job function
Hydra runs, with a multirun's failed jobs from any launcher (`jobs`), and the listings read from conf/ without
composing it: the recipes of conf/experiment with their status (`recipes`), the model= choices and where their
weights come from (`model_choices`). It may import every other part of agentrl;
nothing imports it. `app` is exported here, so that the console script `agentrl = "agentrl.cli:app"` and `python -m
agentrl.cli` (`__main__`) name the package."""

from agentrl.cli.app import app

__all__ = ["app"]
