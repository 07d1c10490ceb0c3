"""Hand CLI arguments to Hydra's own entry point, with every mistake said in one line before any work.

Hydra parses the flags, composes, runs multiruns, sweepers, launchers and ``--cfg``, and makes the output
folders. This module adds only what Hydra lacks (docs/architecture.md, "The shape of a run"):
- `algo=x` is accepted for a group kept out of the defaults list, where Hydra wants `+algo=x`;
- a preflight: Hydra's compose and agentrl's checks on the overrides (each value of a sweep too), so that
  a mistake ends the command with one line, with the keys or options it may have meant, before any job;
- a job wrapper, so that one failing job of a multirun is recorded and the others go on (for a sweeper
  such as Optuna's, a failed trial).
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from agentrl.cli.compose_errors import explain
from agentrl.errors import UserError, fail, first_line
from agentrl.hydra_paths import check_writable, config_dir, hydra_quote, with_config_dir

# Groups kept out of the defaults list so that `+group=x` works; `group=x` is accepted too.
_APPENDED_GROUPS = ("algo", "debug", "hparams_search")


# Mappings whose keys are the user's (the env=gym/gem factory's kwargs): the schema cannot list their keys, and
# Hydra merges `key={...}` into a struct node, which refuses every new key; `++key={...}` adds them.
_FREE_MAPPINGS = ("env.kwargs", "env.ood_kwargs")


def normalise_args(args: list[str]) -> list[str]:
    """Accept `algo=x` as well as Hydra's `+algo=x` for the groups not in the defaults list, and `env.kwargs={...}`
    (and `env.ood_kwargs`) as Hydra's `++env.kwargs={...}`."""
    out = []
    for arg in args:
        key = arg.split("=", 1)[0]
        if "=" in arg and key in _APPENDED_GROUPS:
            arg = f"+{arg}"
        elif "=" in arg and key in _FREE_MAPPINGS:
            arg = f"++{arg}"
        out.append(arg)
    return out


class HydraArgs(NamedTuple):
    """A command line as Hydra's own argument parser reads it."""

    flags: list[str]  # Hydra's flags with their values, as typed
    overrides: list[str]  # the overrides, normalised (`algo=x` -> `+algo=x`)
    parsed: argparse.Namespace
    runs_job: bool  # False for the flags that print or install something instead of running a job


def parse_args(args: list[str]) -> HydraArgs:
    """Split `args` into Hydra's flags and overrides with Hydra's own parser; a bad flag is a UserError."""
    from hydra._internal.utils import get_args_parser  # private, as are the others here: hydra-core is pinned <1.4

    parser = get_args_parser()

    def error(message: str):  # argparse would print its usage over several lines and exit
        raise UserError(f"{message}; see `agentrl --help` and Hydra's flags in `agentrl train --hydra-help`")

    parser.error = error
    # Intermixed, so that `a=1 -m b=2` works: argparse's plain parse (Hydra's) stops at the first flag.
    ns = parser.parse_intermixed_args(args)
    if sum(map(bool, (ns.run, ns.multirun, ns.cfg, ns.info, ns.shell_completion))) > 1:  # Hydra's rule, in one line
        raise UserError("only one of --run, --multirun, --cfg, --info and --shell-completion can be given")
    runs_job = not (ns.help or ns.hydra_help or ns.info or ns.shell_completion or ns.experimental_rerun)
    flags = [arg for arg in args if arg not in ns.overrides]
    return HydraArgs(flags, normalise_args(ns.overrides), ns, runs_job)


# --------------------------------------------------------------------------- preflight


def preflight(
    config_name: str,
    overrides: list[str],
    multirun: bool = False,
    output_folder: bool = False,
    made: list | None = None,
):
    """Compose the overrides as Hydra will and run agentrl's checks on every value of every sweep (in a multirun,
    of the sweeper's search space, hydra.sweeper.params, too) and, with `output_folder`, on the folder Hydra
    will make (appended to `made`). Raise UserError on the first problem; return the job config, typed
    (config/typed.py), every sweep at its first value."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from agentrl.config.store import register_configs

    register_configs()  # the schemas the configs name
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())  # expands glob()
            parsed = _parse(parser, overrides, multirun)
            cfg = _compose(config_name, _first_values(parsed), with_hydra=True)
            if output_folder and (folder := check_output_folder(cfg, multirun)) is not None and made is not None:
                made.append(folder)
            # A sweeper joins its search space to the command line, whose keys win (as in BasicSweeper.sweep)
            params = (cfg.hydra.sweeper.get("params") or {}) if multirun else {}
            given = {o.key_or_group for o in parsed}
            if searched := [f"{k}={v}" for k, v in params.items() if str(k).lstrip("+~") not in given]:
                parsed, cfg = _parse(parser, searched, multirun) + parsed, None  # composed again with it below
            return _check_values(config_name, parser, parsed, cfg)
    finally:
        GlobalHydra.instance().clear()


_MULTIPLE = re.compile(r"^Multiple values for (\w+)\. ")


def preflight_groups(config_name: str, overrides: list[str], *args, **kwargs):
    """`preflight`, and which appended group must override instead: `algo=x` (which agentrl appends, `+algo=x`)
    overrides the group where the config's defaults already choose it, as an `+experiment=` file may (Hydra would
    say "Multiple values for algo"). Returns (the job config, that group or None); `overriding` rewrites."""
    try:
        return preflight(config_name, overrides, *args, **kwargs), None
    except UserError as err:
        found = _MULTIPLE.match(str(err))
        group = found.group(1) if found else None
        if group not in _APPENDED_GROUPS or not any(o.startswith(f"+{group}=") for o in overrides):
            raise
    return preflight(config_name, overriding(overrides, group), *args, **kwargs), group


def overriding(overrides: list[str], group: str | None) -> list[str]:
    """`+group=x` as `group=x`: an override of the option the defaults chose."""
    return [o[1:] if group and o.startswith(f"+{group}=") else o for o in overrides]


def _parse(parser, overrides: list[str], multirun: bool) -> list:
    """Hydra's parse of the overrides, and Hydra's rule: no sweep without -m, no sweep over Hydra's settings."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.types import RunMode

    try:
        parsed = parser.parse_overrides(overrides)
    except Exception as err:  # OverrideParseException and friends
        raise UserError(first_line(str(err)) + _split_value_hint(overrides)) from None
    try:
        ConfigLoaderImpl.validate_sweep_overrides_legal(parsed, RunMode.MULTIRUN if multirun else RunMode.RUN, True)
    except Exception as err:  # Hydra's advice follows on the next lines: keep it, on one
        raise UserError(" ".join(str(err).split())) from None
    return parsed


def _split_value_hint(overrides: list[str]) -> str:
    """Where a word without '=' follows an override whose value is a path, the shell has most likely split the path
    at a space (`hydra.run.dir=runs/my run`): say how to quote it."""
    for before, word in zip(overrides, overrides[1:]):
        if "=" in before and "/" in before.split("=", 1)[1] and "=" not in word and not word.startswith(("~", "+")):
            whole = f"{before} {word}"
            return (
                f"; '{word}' is no override: if it belongs to the value before it, quote the whole override: '{whole}'"
            )
    return ""


def _values(override) -> list[str]:
    """An override's distinct values, each as an override: Hydra expands a sweep; [] for one only a sweeper reads.

    An interval (Optuna's `interval(a, b)`, `tag(log, interval(a, b))`) is checked at its two ends, so that
    a value out of range fails before the first trial, like any other sweep."""
    if not override.is_sweep_override():
        return [override.input_line]
    try:
        if override.is_interval_sweep():
            values = [str(override.value().start), str(override.value().end)]
        else:
            values = list(override.sweep_string_iterator())
    except Exception:  # a sweep type of a sweeper plugin: the sweeper reports its own mistakes
        return []
    return [f"{override.get_key_element()}={value}" for value in dict.fromkeys(values)]


def _first_values(parsed: list) -> list[str]:
    """One job's overrides: every sweep at its first value."""
    return [values[0] for values in map(_values, parsed) if values]


def _compose(config_name: str, lines: list[str], with_hydra: bool = False):
    """Hydra's compose of one job's overrides; an error becomes one UserError."""
    from hydra import compose

    try:
        return compose(config_name=config_name, overrides=lines, return_hydra_config=with_hydra)
    except Exception as err:
        raise UserError(explain(err, config_name, lines)) from None


def _check_values(config_name: str, parser, parsed: list, composed: Any = None) -> Any:
    """Check the job config (`composed`, with Hydra's node, when already composed), then every other value of
    every sweep. A group's value (`env=a,b`) changes what is composed, so it gets its own compose; any other
    value is applied to a copy of the job config by Hydra's own function, for a hundredth of the cost."""
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from agentrl.config.checks import check_config
    from agentrl.config.typed import typed

    swept = [(o, values) for o in parsed if (values := _values(o))]
    base = [values[0] for _, values in swept]
    job = _compose(config_name, base, with_hydra=True) if composed is None else composed
    with open_dict(job):
        del job["hydra"]  # as a job sees it (compose's default)
    checked_job = typed(job)
    check_config(checked_job)
    loader = GlobalHydra.instance().config_loader()
    for position, (override, values) in enumerate(swept):
        is_group = bool(loader.get_group_options(override.key_or_group))
        for line in values[1:]:
            if is_group:
                variant = _compose(config_name, base[:position] + [line] + base[position + 1 :])
            else:
                variant = with_override(config_name, parser, job, line)
            check_config(typed(variant))
    return checked_job


def with_override(config_name: str, parser, job: Any, line: str) -> Any:
    """A copy of a composed job config with one value override applied by Hydra's own function (what a sweep's
    other values get); an error becomes one UserError."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    variant = copy.deepcopy(job)
    try:
        ConfigLoaderImpl._apply_overrides_to_config(parser.parse_overrides([line]), variant)
    except Exception as err:
        raise UserError(explain(err, config_name, [line])) from None
    return variant


def check_output_folder(cfg, multirun: bool) -> Path | None:
    """Hydra makes the run (or sweep) folder before any job runs; make it here first, so that whatever stands in
    the way (a file, a parent that cannot exist, a read-only place, no permission) is one line, not a traceback."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        folder = Path(cfg.hydra.sweep.dir if multirun else cfg.hydra.run.dir)
    except Exception:  # an interpolation only a running Hydra resolves: Hydra says what is wrong itself
        return None
    check_writable(folder, key)
    return folder


# --------------------------------------------------------------------------- the Hydra entry point


def run_hydra(config_name: str, args: list[str], entry: Callable) -> None:
    """Run `entry(cfg)` under Hydra's own main, as if `args` were typed after the command; before any job,
    every override is checked (preflight) and the output folder too."""
    import hydra
    from hydra.errors import CompactHydraException

    from agentrl.cli.jobs import Jobs, failed_under, launcher_failure
    from agentrl.config.store import register_configs

    register_configs()
    command = parse_args(args)
    made: list[Path] = []
    quiet: list[str] = []  # what a job on a machine other than machine 0 leaves out of the shared run folder
    if command.runs_job:
        make_folder = not command.parsed.cfg  # --cfg prints the config; Hydra makes no folder for it
        name = command.parsed.config_name or config_name
        overrides = with_config_dir(command.overrides, command.parsed.config_dir)
        job, group = preflight_groups(name, overrides, command.parsed.multirun, make_folder, made)
        command = command._replace(overrides=overriding(command.overrides, group))
        hardware = getattr(job, "hardware", None)
        if hardware is not None and hardware.num_machines > 1 and hardware.machine_rank > 0:
            from agentrl.train.machines import OFF_RUN_FOLDER

            # machine 0's job writes the run folder's .hydra/ and log (a rank has them from its launcher already)
            quiet = [o for o in OFF_RUN_FOLDER if o not in command.overrides]
    sweep_dir = made[0] if made and command.parsed.multirun else None
    pinned = [f"hydra.sweep.dir={hydra_quote(str(sweep_dir))}"] if sweep_dir is not None else []
    if any(o.startswith("hydra.sweep.dir=") for o in command.overrides):
        pinned = []  # the user's own; otherwise the folder made above, so that its jobs' records are found

    # In a multirun, let a sweeper's own error reach us instead of Hydra's printout: Optuna's sweeper, for one,
    # raises when every trial failed (no best trial), which is better said in one line with the jobs' errors.
    full_error = command.parsed.multirun and "HYDRA_FULL_ERROR" not in os.environ
    jobs = Jobs(entry, full_error_set=full_error)
    saved_argv = sys.argv
    sys.argv = [f"agentrl {config_name}", *command.flags, *command.overrides, *pinned, *quiet]
    if full_error:
        os.environ["HYDRA_FULL_ERROR"] = "1"
    started = time.time()
    try:
        main = hydra.main(config_path=str(config_dir()), config_name=config_name, version_base="1.3")
        main(jobs.run)()
    except Exception as err:
        if command.parsed.multirun:
            jobs.failed += failed_under(sweep_dir, started, known=jobs.failed)
            if jobs.failed or isinstance(err, CompactHydraException):
                fail(jobs.summary() if jobs.failed else first_line(str(err)), 1)
            if (line := launcher_failure(err)) is not None:  # a job that died under submitit's launcher
                fail(line, 1)
        raise
    finally:
        sys.argv = saved_argv
        if full_error:
            os.environ.pop("HYDRA_FULL_ERROR", None)
    if command.parsed.multirun:  # jobs that a launcher ran in other processes recorded their failures on disk
        jobs.failed += failed_under(sweep_dir, started, known=jobs.failed)
    if jobs.failed:
        fail(jobs.summary(), 1)
