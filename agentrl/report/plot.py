"""`agentrl report`'s plot: learning curves over seeds and, under them, the step-credit diagnostics.

The numbers are agentrl/report/compare.py's (`Report`, `ConfigSummary.mean_curve` and `credit_curve`); this module only
draws them, with matplotlib's object API (agentrl/report/curves.py: `draw_panel`, `write_file`). docs/algorithms.md,
"Reading the step-credit diagnostics", says how to read the panels.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from agentrl.errors import UserError
from agentrl.report.compare import CREDIT, Report
from agentrl.report.curves import CREDIT_PANELS, draw_panel, write_file

PLOT_FORMATS = (".png", ".pdf", ".svg")


def plot_curves(report: Report, out: Path) -> Path:
    """Learning curves: mean over seeds per configuration, min..max band, dashed threshold line; under them, the
    step-credit panels (`CREDIT_PANELS`) where any run logged the diagnostics."""
    from matplotlib.figure import Figure  # no pyplot: no display, no global state (renders with Agg)

    out = Path(out)
    if out.suffix.lower() not in PLOT_FORMATS:
        raise UserError(f"--out {out} must end with one of {', '.join(PLOT_FORMATS)}")
    credit = {s.label: {m: s.credit_curve(m) for m in CREDIT} for s in report.configs}
    with_credit = any(curve["iteration"] for curves in credit.values() for curve in curves.values())
    if with_credit:
        fig = Figure(figsize=(16, 9), dpi=110, layout="constrained")
        keys = [f"credit{i}" for i in range(len(CREDIT_PANELS))]
        axes = fig.subplot_mosaic([["curves"] * len(keys), keys], height_ratios=[1.3, 1])
        ax = axes["curves"]
    else:
        fig = Figure(figsize=(8, 5), dpi=120, layout="constrained")
        ax = fig.add_subplot()
    colors = {s.label: _color(i, len(report.configs)) for i, s in enumerate(report.configs)}
    _draw_learning_curves(ax, report, colors)
    if report.shared:
        fig.suptitle("\n".join(textwrap.wrap("shared: " + " ".join(report.shared), 110)), fontsize="x-small")
    if with_credit:
        for key, (title, ylabel, ylim, metrics) in zip(keys, CREDIT_PANELS):
            lines = {
                label: {name: (curves[m]["iteration"], curves[m]["mean"]) for m, name in metrics}
                for label, curves in credit.items()
            }
            draw_panel(axes[key], lines, colors, title, ylabel, ylim)
    return write_file(out, fig.savefig, out)


def _color(i: int, configurations: int) -> Any:
    from matplotlib import colormaps

    return f"C{i}" if configurations <= 10 else colormaps["tab20"](i % 20)


def _draw_learning_curves(ax: Any, report: Report, colors: dict[str, Any]) -> None:
    for s in report.configs:
        color = colors[s.label]
        label, curve = f"{s.label} (n={len(s.runs)})", s.mean_curve()
        if curve["iteration"]:
            ax.plot(curve["iteration"], curve["mean"], color=color, marker="o", markersize=3, label=label)
            if len(s.runs) > 1:
                ax.fill_between(curve["iteration"], curve["min"], curve["max"], color=color, alpha=0.2, linewidth=0)
        else:  # the seeds share no iteration (or there are none): show each seed
            for j, (_, seed) in enumerate(s.curves.items()):
                seed = seed.dropna()
                ax.plot(seed.index, seed.values, color=color, alpha=0.6, linewidth=1, label=None if j else label)
    ax.axhline(report.threshold, color="gray", linestyle="--", linewidth=1, label=f"threshold {report.threshold:g}")
    ax.set(
        xlabel="iteration",
        ylabel=report.metric,
        title=f"{report.name}: {report.metric} (mean over seeds, band = min..max)",
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")
