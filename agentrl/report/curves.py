"""Pictures of runs, drawn with matplotlib's object API (no pyplot: no display, no global state; renders with Agg).

`plot_run` draws one run's learning curves, which every `agentrl train` leaves in its folder as `curves.png`;
`agentrl report` (agentrl/report/compare.py) draws many runs' curves, with `draw_panel` for the panels of several metrics
beside them, and writes through `write_file` too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl import metrics_log
from agentrl.errors import UserError

RUN_PLOT = "curves.png"  # <run>/curves.png
LINE_STYLES = ("-", "--", ":", "-.")  # one per metric of a panel; colours stay the configurations'

# The step-credit panels under the learning curves (a run's and agentrl report's): (title, y label, y limits or None, ((metric, its legend label), ...)).
# docs/algorithms.md, "Reading the step-credit diagnostics", says how to read them.
CREDIT_PANELS = (
    (
        "step-group sizes (share of steps)",
        "share of steps",
        (-0.02, 1.02),
        (
            ("credit/step_group_size_1_share", "size 1"),
            ("credit/step_group_size_2_4_share", "2-4"),
            ("credit/step_group_size_5_9_share", "5-9"),
            ("credit/step_group_size_10_plus_share", ">= 10"),
        ),
    ),
    (
        "step signal",
        "share",
        (-0.02, 1.02),
        (
            ("credit/step_advantage_nonzero_share", "steps with A_step != 0"),
            ("credit/episode_groups_no_signal_share", "task groups, all returns equal"),
            ("credit/step_groups_no_signal_share", "step groups (>= 2), all equal"),
        ),
    ),
    (
        "advantage size",
        "mean |A|",
        None,
        (("credit/episode_advantage_abs_mean", "|A_episode|"), ("credit/step_advantage_abs_mean", "|A_step|")),
    ),
    (
        "episode vs step credit",
        "Pearson r",
        (-1.05, 1.05),
        (("credit/episode_step_advantage_correlation", "r(A_episode, A_step)"),),
    ),
)


def write_file(path: Path, write: Callable[..., Any], *args: Any) -> Path:
    """`write(*args)` into `path`, its folder made first; a one-line error where it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(*args)
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}; choose another place with --out") from err
    return path


def _series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [
        (r["iteration"], r[key]) for r in records if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
    ]
    return [i for i, _ in points], [v for _, v in points]


def plot_run(run_dir: Path, out: Path | None = None) -> Path | None:
    """A run's learning curves from its metrics.jsonl: held-out and rollout success on the left, the loss on the
    right, and under them the step-credit diagnostics where the run logged them. None when it logged nothing."""
    from matplotlib.figure import Figure

    records = metrics_log.read_records(run_dir)
    if not records:
        return None
    out = Path(out) if out is not None else Path(run_dir) / RUN_PLOT
    credit = any(key.startswith("credit/") for r in records for key in r)
    layout = [["success", "success", "loss", "loss"]] + ([[f"credit{i}" for i in range(4)]] if credit else [])
    fig = Figure(figsize=(12, 7 if credit else 4), dpi=110, layout="constrained")
    axes = fig.subplot_mosaic(layout)
    success, loss = axes["success"], axes["loss"]
    iterations, values = _series(records, "rollout/success")
    success.plot(iterations, values, color="C0", linewidth=1, alpha=0.7, label="rollout success")
    iterations, values = _series(records, "eval/success")
    success.plot(iterations, values, color="C1", marker="o", markersize=4, label="held-out success")
    success.set(xlabel="iteration", ylabel="success", ylim=(-0.02, 1.02), title="success")
    success.legend(fontsize="small", loc="best")
    iterations, values = _series(records, "train/loss")
    loss.plot(iterations, values, color="C2", linewidth=1)
    loss.set(xlabel="iteration", ylabel="train/loss", title="loss")
    for ax in (success, loss):
        ax.grid(True, alpha=0.3)
    if credit:  # what step credit had to work with (docs/algorithms.md, "Reading the step-credit diagnostics")
        for i, (title, ylabel, ylim, metrics) in enumerate(CREDIT_PANELS):
            lines = {"run": {label: _series(records, key) for key, label in metrics}}
            draw_panel(axes[f"credit{i}"], lines, {"run": "C3"}, title, ylabel, ylim)
    fig.suptitle(str(run_dir), fontsize="small")
    return write_file(out, fig.savefig, out)


def draw_panel(
    ax: Any,
    lines: dict[str, dict[str, tuple[list, list]]],
    colors: dict[str, Any],
    title: str,
    ylabel: str,
    ylim: tuple[float, float] | None = None,
) -> None:
    """Several metrics of several configurations on one axis: `lines[configuration][metric label] = (x, y)`.

    A configuration keeps its colour (`colors`, as in the learning curves beside the panel), and a metric
    has one line style in every configuration; the legend names the metrics drawn by their line styles. A
    panel with no points says so.
    """
    from matplotlib.lines import Line2D

    styles = {label: LINE_STYLES[i % len(LINE_STYLES)] for i, label in enumerate(dict.fromkeys(_labels(lines)))}
    drawn: dict[str, str] = {}
    for config, metrics in lines.items():
        for label, (x, y) in metrics.items():
            if x:
                ax.plot(x, y, color=colors[config], linestyle=styles[label], linewidth=1.2)
                drawn[label] = styles[label]
    ax.set(xlabel="iteration", ylabel=ylabel, title=title)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.title.set_fontsize("small")
    ax.grid(True, alpha=0.3)
    if not drawn:
        ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        return
    keys = [Line2D([], [], color="black", linestyle=style) for style in drawn.values()]
    ax.legend(keys, list(drawn), fontsize="x-small", loc="best")


def _labels(lines: dict[str, dict[str, tuple[list, list]]]) -> list[str]:
    return [label for metrics in lines.values() for label in metrics]
