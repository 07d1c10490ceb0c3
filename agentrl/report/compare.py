"""`agentrl report`: compare configurations across seeds from their run folders.

find_runs -> load_run -> group_runs (overrides but `seed=...`) -> build_report -> report_dict (report.json);
agentrl/report/tables.py draws the tables and agentrl/report/plot.py the plot. The numbers come from one pandas table of
iterations × runs (`metric_table`). A run's "final" value is the metric's value in the last record that has one; "best" is its
maximum; "iterations to threshold" is the first iteration whose value is >= the threshold. Spread over seeds is
the sample standard deviation (ddof=1); with one seed there is none (shown without "±", null in JSON). The curve
of a configuration is the mean over its seeds at the iterations that *all* its seeds logged (no interpolation),
so a seed that stopped early cuts it short; the band is the min..max over seeds at the same iterations.

Where the runs logged the step-credit diagnostics (`credit/*`, agentrl/algos/credit_diagnostics.py), report.json
gives their mean curves over seeds (`credit_curve`) and the plot draws them under the learning curves; a team's
per-agent final success and invalid rate (`eval/agent/...`) are in report.json and a second table; a tool-calling
run's tool use (`rollout/tool_calls`, `rollout/tool_errors/<kind>`, turns per episode) in report.json and a third."""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from agentrl import health, metrics_log, run_folder
from agentrl.algos.credit_diagnostics import CREDIT_METRICS
from agentrl.errors import UserError
from agentrl.report.curves import write_file
from agentrl.report.tool_use import tool_use

DEFAULT_METRIC = "eval/success"
METRICS = metrics_log.FILENAME
CREDIT = [f"credit/{name}" for name in CREDIT_METRICS]
AGENT_PREFIX = "eval/agent/"  # a team's per-agent held-out figures (agentrl/rollout/batch.py, agent_breakdown)
AGENT_FIGURES = ("success", "invalid_rate")


@dataclass
class Run:  # one run folder, as read from disk
    path: Path
    name: str  # relative to the report's root ("." for the root itself)
    records: list[dict] = field(default_factory=list)
    overrides: list[str] | None = None  # None: no .hydra/overrides.yaml (nor FAILED.json overrides)
    seed: Any = None
    failed: str | None = None  # the error from FAILED.json, or a crashed run's, or None
    status: dict = field(default_factory=dict)  # run_folder.run_status: finished, stopped, crashed, killed, running


def _natural_key(text: str) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]


def find_runs(root: Path) -> list[Path]:
    """Run folders under `root` (or `root` itself) in natural order (2 before 10): those with metrics.jsonl or
    FAILED.json, and a multirun's numbered job folders (by multirun.yaml) with neither (killed), but eval jobs."""
    root = Path(root)
    found: set[Path] = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".hydra", "wandb")]
        here = Path(folder)
        if METRICS in files or "FAILED.json" in files:
            found.add(here)
        if "multirun.yaml" in files:
            jobs = (here / d for d in dirs if d.isdigit())
            found.update(job for job in jobs if (job / ".hydra").is_dir() and not (job / "eval.json").is_file())
    return sorted(found, key=lambda p: _natural_key(p.relative_to(root).as_posix()))


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_overrides(run_dir: Path) -> list[str] | None:
    """The job's Hydra overrides, or None when the run was not made through Hydra."""
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    if data is None:
        return []
    return [str(item) for item in data] if isinstance(data, list) else None


def is_seed_override(override: str) -> bool:
    return override.lstrip("+~").split("=", 1)[0].strip() == "seed"


def load_run(run_dir: Path, root: Path) -> Run:
    run_dir = Path(run_dir)
    failure = _read_json(run_dir / "FAILED.json") if (run_dir / "FAILED.json").is_file() else None
    overrides = read_overrides(run_dir)
    if overrides is None and failure and isinstance(failure.get("overrides"), list):
        overrides = [str(o) for o in failure["overrides"]]
    config = _read_json(run_dir / "run.json").get("config")
    seed = config.get("seed") if isinstance(config, dict) else None
    if seed is None:  # the last seed=... override
        seed = next((o.split("=", 1)[1] for o in reversed(overrides or []) if is_seed_override(o) and "=" in o), None)
    failed = None if failure is None else str(failure.get("error") or failure.get("type") or "FAILED.json (no message)")
    records = metrics_log.read_records(run_dir)
    status = run_folder.run_status(run_dir, records)
    if failure is not None:
        status = {**status, "status": "crashed", "line": failed}
    elif status["status"] == "crashed":  # a single run's crash: it has no FAILED.json, its ended.json says it
        failed = f"crashed after iteration {status['iteration']}: {status['line']}"
    name = run_dir.relative_to(root).as_posix() if run_dir != root else "."
    return Run(run_dir, name, records, overrides, seed, failed, status)


STATUSES = ("finished", "stopped", "killed", "running", "crashed")


def status_text(run: Run) -> str:
    """ "finished", "stopped after iteration 40 (the line)", "killed after iteration 12", ..."""
    status, iteration, line = run.status.get("status", "killed"), run.status.get("iteration"), run.status.get("line")
    if status == "finished":
        return status
    text = f"{status} after iteration {iteration}" if iteration is not None else status
    return f"{text}: {line}" if line and status == "stopped" else text


@dataclass
class Configuration:
    label: str
    overrides: list[str] | None  # without the seed; None for a run grouped by its folder name
    runs: list[Run] = field(default_factory=list)


def group_runs(runs: list[Run]) -> list[Configuration]:
    """Configurations in order of first appearance: runs with the same overrides but the seed pool together; a run
    not made through Hydra is a configuration of its own, labelled by its folder."""
    groups: dict[tuple, Configuration] = {}
    for run in runs:
        if run.overrides is None:
            label = run.name if run.name != "." else (run.path.resolve().name or str(run.path))
            key, rest = ("folder", run.name), None
        else:
            rest = [o for o in run.overrides if not is_seed_override(o)]
            key, label = ("overrides", tuple(sorted(rest))), " ".join(rest) or "(defaults)"
        groups.setdefault(key, Configuration(label=label, overrides=rest)).runs.append(run)
    return list(groups.values())


def relabel(configs: list[Configuration]) -> list[str]:
    """The overrides every configuration has (a sweep's fixed settings; none for one configuration), in the first
    one's order, taken out of the labels so that a sweep's table and legend stay readable."""
    overrides = [c.overrides for c in configs if c.overrides is not None]
    if len(configs) < 2 or len(overrides) < len(configs):
        return []
    shared = [o for o in overrides[0] if all(o in rest for rest in overrides[1:])]
    if shared:
        for c in configs:
            c.label = " ".join(o for o in c.overrides if o not in shared) or "(shared overrides only)"
    return shared


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any, kind: type = float) -> Any:
    return None if pd.isna(value) else kind(value)


def mean_std(values) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof=1); std is None for fewer than two values."""
    values = pd.Series(values, dtype=float)
    return _number(values.mean()), _number(values.std(ddof=1))


def metric_table(runs: list[Run], metric: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(points, curves). Points: every record of every run in file order, as run (name), iteration and value, NaN
    where not a finite number. Curves: iterations × runs, the last write of an iteration winning, NaN where none."""
    rows = [(run.name, r.get("iteration"), r.get(metric)) for run in runs for r in run.records]
    points = pd.DataFrame(rows, columns=["run", "iteration", "value"], dtype=object)
    for column in ("iteration", "value"):
        points[column] = points[column].where(points[column].map(_finite)).astype(float)
    logged = points.dropna()
    logged = logged.assign(iteration=logged["iteration"].astype(int)).drop_duplicates(["run", "iteration"], keep="last")
    return points, logged.pivot(index="iteration", columns="run", values="value").sort_index()


def failure_reason(run: Run, metric: str, logged: bool) -> str | None:
    """Why a run cannot be summarised (`logged`: it has values of the metric), or None when it can."""
    if run.failed is not None or logged:
        return run.failed
    if not metrics_log.path_of(run.path).is_file():
        return f"no {METRICS} (killed, or still starting?)"
    return f"no {metric} records in {len(run.records)} metrics line(s)" if run.records else f"{METRICS} is empty"


@dataclass
class ConfigSummary:
    config: Configuration
    table: pd.DataFrame  # one row per run that can be summarised: run, final, best, to_threshold, last_iteration
    curves: pd.DataFrame  # iterations × those runs
    failed: list[tuple[Run, str]]

    label = property(lambda self: self.config.label)
    final = property(lambda self: mean_std(self.table["final"]))
    best = property(lambda self: mean_std(self.table["best"]))
    to_threshold_mean = property(lambda self: _number(self.table["to_threshold"].mean()))
    reached = property(lambda self: int(self.table["to_threshold"].count()))
    last_iteration = property(
        lambda self: tuple(_number(v, int) for v in self.table["last_iteration"].agg(["min", "max"]))
    )

    @property
    def runs(self) -> list[tuple]:
        """A named tuple per summarised run: final, best, to_threshold (None: never), last_iteration, config, run."""
        table = self.table.astype({"to_threshold": "Int64", "last_iteration": "Int64"}).astype(object)
        return list(table.where(table.notna(), None).itertuples(index=False, name="RunSummary"))

    def mean_curve(self) -> dict[str, list]:
        common = self.curves.dropna(how="all").dropna()  # (no seeds: no rows)
        return {"iteration": common.index.tolist(), **common.agg(["mean", "min", "max"], axis=1).to_dict("list")}

    def by_agent(self) -> dict[str, dict[str, dict]]:
        """A team's final held-out figures per agent (`eval/agent/<agent>/<figure>` in the last record that has
        them; AGENT_FIGURES), mean and std over the summarised seeds; empty where no run logged any."""
        finals: dict[str, dict[str, list[float]]] = {}
        for run in (run for run in self.config.runs if run.name in self.curves.columns):
            last = next((r for r in reversed(run.records) if any(k.startswith(AGENT_PREFIX) for k in r)), {})
            for key, value in last.items():
                agent, _, figure = key.removeprefix(AGENT_PREFIX).partition("/")
                if key.startswith(AGENT_PREFIX) and figure in AGENT_FIGURES and _finite(value):
                    finals.setdefault(agent, {}).setdefault(figure, []).append(value)
        stats = ("mean", "std")
        return {
            a: {f: dict(zip(stats, mean_std(v))) for f, v in figures.items()} for a, figures in sorted(finals.items())
        }

    def tool_use(self) -> dict[str, dict]:
        """Tool use over the summarised seeds' rollouts (env=tools; agentrl/report/tool_use.py)."""
        return tool_use([run.records for run in self.config.runs if run.name in self.curves.columns])

    def credit_curve(self, metric: str) -> dict[str, list]:
        """Another metric's mean over the summarised seeds that logged it, at the iterations all of them have
        a finite value (a null correlation drops its iteration); empty lists where none logged it."""
        runs = [run for run in self.config.runs if run.name in self.curves.columns]
        common = metric_table(runs, metric)[1].dropna()
        return {"iteration": common.index.tolist(), "mean": common.mean(axis=1).tolist()}


def summarise(
    groups: list[Configuration], points: pd.DataFrame, curves: pd.DataFrame, metric: str, threshold: float
) -> list[ConfigSummary]:
    """Each run's final, best, iterations to threshold and last iteration, grouped by configuration."""
    reached = curves.ge(threshold)
    per_run = pd.DataFrame(
        {
            "final": points.dropna(subset=["value"]).groupby("run")["value"].last(),
            "best": curves.max(),
            "to_threshold": reached.idxmax().where(reached.any()),
            "last_iteration": points.groupby("run")["iteration"].max(),
        }
    )
    reasons = {run.name: failure_reason(run, metric, run.name in curves) for g in groups for run in g.runs}
    ok = [(i, run) for i, g in enumerate(groups) for run in g.runs if reasons[run.name] is None]
    per_run = per_run.reindex([run.name for _, run in ok]).assign(config=[i for i, _ in ok], run=[r for _, r in ok])
    tables = dict(list(per_run.groupby("config")))  # the configurations that have runs to summarise
    summaries = [(g, tables.get(i, per_run.iloc[:0])) for i, g in enumerate(groups)]
    return [
        ConfigSummary(g, table, curves[table.index], [(r, reasons[r.name]) for r in g.runs if reasons[r.name]])
        for g, table in summaries
    ]


@dataclass
class Report:
    root: Path
    name: str
    metric: str
    threshold: float
    configs: list[ConfigSummary]
    shared: list[str] = field(default_factory=list)  # overrides every configuration has, left out of the labels

    @property
    def failed(self) -> list[tuple[ConfigSummary, Run, str]]:
        return [(c, run, reason) for c in self.configs for run, reason in c.failed]

    @property
    def unfinished(self) -> list[tuple[ConfigSummary, Run]]:
        """Summarised runs that did not finish (stopped, killed, still running): their "final" is where they ended."""
        return [(c, r.run) for c in self.configs for r in c.runs if r.run.status.get("status", "killed") != "finished"]

    def counts(self) -> dict[str, int]:
        runs = [run for c in self.configs for run in c.config.runs]
        return {status: sum(run.status.get("status", "killed") == status for run in runs) for status in STATUSES}


def build_report(path: Path, metric: str = DEFAULT_METRIC, threshold: float = 0.5) -> Report:
    """Find, load, group and summarise the runs under `path`; UserError for what the user can fix."""
    if not math.isfinite(threshold):
        raise UserError(f"--threshold must be a finite number, got {threshold}")
    root = Path(path).expanduser()
    if not root.exists():
        raise UserError(f"{path} does not exist")
    if root.is_file():
        if root.name != METRICS:
            raise UserError(f"{path} is a file; give a run folder, a multirun folder or a folder of runs")
        root = root.parent
    folders = find_runs(root)
    if not folders:
        raise UserError(f"no runs under {path} (looked for {METRICS})")
    runs = [load_run(folder, root) for folder in folders]
    points, curves = metric_table(runs, metric)
    if curves.empty:
        logged = sorted({k for run in runs for r in run.records for k, v in r.items() if _finite(v)} - {"iteration"})
        if not logged:
            failed = [r for r in runs if r.failed]
            detail = f"; {len(failed)} run(s) failed, first: {failed[0].name}: {failed[0].failed}" if failed else ""
            raise UserError(f"no run under {path} logged any metric{detail}")
        close = difflib.get_close_matches(metric, logged, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"{metric} was never logged under {path}{hint}; logged: {', '.join(logged)}")
    groups = group_runs(runs)
    shared = relabel(groups)
    configs = summarise(groups, points, curves, metric, threshold)
    resolved = root.resolve()  # for the title; a Hydra time folder (12-00-00) keeps its date folder
    hydra_time = re.fullmatch(r"\d\d-\d\d-\d\d", resolved.name) and resolved.parent.name
    name = f"{resolved.parent.name}/{resolved.name}" if hydra_time else resolved.name or str(root)
    return Report(root=root, name=name, metric=metric, threshold=threshold, configs=configs, shared=shared)


def report_dict(report: Report, plot: Path | None = None) -> dict:
    """The table's numbers (and each run's), ready for json.dumps."""
    configs = [
        {
            "label": s.label,
            "overrides": s.config.overrides,
            "seeds": len(s.runs),
            "failed": len(s.failed),
            "final": dict(zip(("mean", "std"), s.final)),
            "best": dict(zip(("mean", "std"), s.best)),
            "iterations_to_threshold": {"mean": s.to_threshold_mean, "reached": s.reached, "runs": len(s.runs)},
            "last_iteration": dict(zip(("min", "max"), s.last_iteration)),
            "curve": s.mean_curve(),
            "credit": {m: curve for m in CREDIT if (curve := s.credit_curve(m))["iteration"]},
            "by_agent": s.by_agent(),
            "tool_use": s.tool_use(),
            "runs": [
                {"path": r.run.name, "seed": r.run.seed, "status": r.run.status, "final": r.final, "best": r.best}
                | {"iterations_to_threshold": r.to_threshold, "last_iteration": r.last_iteration}
                | {"warnings": health.run_warnings(r.run.records)}
                for r in s.runs
            ],
        }
        for s in report.configs
    ]
    return {
        "path": str(report.root),
        "metric": report.metric,
        "threshold": report.threshold,
        "std": "sample standard deviation over seeds (ddof=1); null with one seed",
        "curve": "mean, min and max over seeds at the iterations all seeds logged (no interpolation)",
        "credit": "step-credit diagnostics (credit/*): mean over the seeds that logged them, at their common iterations",
        "tool_use": "env=tools: rollout tool calls and errors (by kind) summed over each run's iterations, errors over "
        "calls, mean turns per episode; mean and sample std over seeds",
        "shared_overrides": report.shared,
        "configurations": configs,
        "runs": report.counts(),
        "failed": [{"path": run.name, "configuration": c.label, "reason": reason} for c, run, reason in report.failed],
        "plot": str(plot) if plot is not None else None,
    }


def write_report_json(report: Report, path: Path, plot: Path | None = None) -> Path:
    path = Path(path)
    text = json.dumps(report_dict(report, plot), indent=2, allow_nan=False, default=str) + "\n"
    return write_file(path, path.write_text, text)
