"""`agentrl report`'s tables, drawn with rich from agentrl/report/compare.py's numbers: one row per configuration, a
team's figures per agent, a line per run that failed, and the learning-health warnings each run logged."""

from __future__ import annotations

from agentrl import health
from agentrl.report.compare import AGENT_FIGURES, ConfigSummary, Report, status_text


def _fmt_value(mean: float | None, std: float | None) -> str:
    return "-" if mean is None else f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std:.3f}"


def format_to_threshold(summary: ConfigSummary) -> str:
    mean, runs = summary.to_threshold_mean, len(summary.runs)
    if mean is None:
        return "-"
    text = f"{mean:.0f}" if float(mean).is_integer() else f"{mean:.1f}"
    return text + (f" ({summary.reached}/{runs} reached)" if summary.reached < runs else "")


def render_table(report: Report):
    """One row per configuration."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=f"{report.name}: {report.metric}",
        caption=(
            "mean ± sample std (ddof=1) over seeds (no ± with one seed); final = last logged value, "
            "best = each run's max; iters = first iteration at the threshold, mean over the runs that reached it"
            + ("; ✗ = failed runs, listed below" if report.failed else "")
            + (f"\nshared by every configuration: {' '.join(report.shared)}" if report.shared else "")
        ),
    )
    # in a narrow terminal the label wraps; the mean ± std stay on one line
    table.add_column("configuration", overflow="fold")
    for column in ("seeds", "final", "best", f"iters to ≥ {report.threshold:g}", "last iter"):
        table.add_column(column, justify="right", no_wrap=column in ("seeds", "final", "best"))
    for s in report.configs:
        seeds = f"{len(s.runs)}" + (f" +{len(s.failed)}✗" if s.failed else "")
        low, high = s.last_iteration
        last = "-" if low is None else str(low) if low == high else f"{low}–{high}"
        table.add_row(Text(s.label), seeds, _fmt_value(*s.final), _fmt_value(*s.best), format_to_threshold(s), last)
    return table


def render_agent_table(report: Report):
    """A team's final held-out success and invalid rate per configuration and agent; None without a team."""
    from rich.table import Table
    from rich.text import Text

    rows = [(s.label, agent, figures) for s in report.configs for agent, figures in s.by_agent().items()]
    if not rows:
        return None
    table = Table(title=f"{report.name}: by agent, at the last evaluation", caption="mean ± sample std over seeds")
    for column in ("configuration", "agent", "success of its episodes", "invalid rate"):
        table.add_column(column, justify="left" if column in ("configuration", "agent") else "right", overflow="fold")
    for label, agent, figures in rows:
        table.add_row(
            Text(label), agent, *(_fmt_value(*figures[f].values()) if f in figures else "-" for f in AGENT_FIGURES)
        )
    return table


def render_tool_table(report: Report):
    """Tool use per configuration (env=tools): calls, errors and their share, the errors by kind, turns per episode
    over the rollouts; None where no run called tools."""
    from rich.table import Table
    from rich.text import Text

    rows = [(s.label, use) for s in report.configs if (use := s.tool_use())]
    if not rows:
        return None
    table = Table(
        title=f"{report.name}: tool use in the rollouts",
        caption="per run, summed over its iterations; mean ± sample std over seeds",
    )
    for column in ("configuration", "tool calls", "tool errors", "error share", "errors by kind", "turns/episode"):
        table.add_column(column, justify="left" if column in ("configuration", "errors by kind") else "right")
    for label, use in rows:
        kinds = ", ".join(
            f"{name.removeprefix('tool_errors/')} {figures['mean']:g}"
            for name, figures in use.items()
            if name.startswith("tool_errors/") and figures["mean"]
        )
        figures = (use.get(name, {"mean": None, "std": None}) for name in ("tool_calls", "tool_errors", "error_share"))
        turns = use.get("turns_per_episode", {"mean": None, "std": None})
        table.add_row(
            Text(label), *(_fmt_value(*f.values()) for f in figures), kinds or "-", _fmt_value(*turns.values())
        )
    return table


def side_tables(report: Report) -> list:
    """The tables beside the main one, where the runs logged what they show: by agent, tool use."""
    return [table for table in (render_agent_table(report), render_tool_table(report)) if table is not None]


def failed_lines(report: Report) -> list[str]:
    """One line per run that failed or logged no value of the metric."""
    header = [f"{len(report.failed)} run(s) failed or logged no {report.metric}:"] if report.failed else []
    return header + [f"  {run.name} [{config.label}]: {reason}" for config, run, reason in report.failed]


def unfinished_lines(report: Report) -> list[str]:
    """The counts of finished, stopped, killed and crashed runs, and one line per summarised run that did not
    finish: its "final" is where it ended, which the table pools with the seeds that went on."""
    counts = ", ".join(f"{n} {status}" for status, n in report.counts().items() if n)
    lines = [f"runs: {counts}"]
    if report.unfinished:
        lines.append("not finished (their final value is where they ended; compare the last iter column):")
        lines += [f"  {run.name} [{config.label}]: {status_text(run)}" for config, run in report.unfinished]
    return lines


def warning_lines(report: Report) -> list[str]:
    """The learning-health warnings each run logged (agentrl/health.py: no signal, entropy collapse, held-out drop),
    one line each, under the run's name."""
    lines = [
        f"  {run.name}: {line}"
        for c in report.configs
        for run in c.config.runs
        for line in health.run_warnings(run.records)
    ]
    return ["why a run may not have learned (agentrl/health.py):", *lines] if lines else []
