"""The statistics of a seed study: held-out success read off runs' metric logs, compared between arms.

An *arm* is one configuration (an estimator) trained with several seeds. These pure functions take the
records of `metrics.jsonl` (agentrl.metrics_log.read_records) and give:

- ``timed_curve`` / ``success_at``: held-out success at a fixed training time (rollout + update seconds,
  evaluation time left out), so that arms that spend different time per iteration compare at equal cost;
- ``success_at_iteration``: the held-out success logged at an iteration;
- ``bootstrap_difference``: a percentile bootstrap interval of the difference of two arms' mean success,
  resampling each arm's seeds independently (seeds are the unit of replication);
- ``credit_means``: a run's step-credit diagnostics (``credit/*``), averaged over its iterations;
- ``paired_gains``: the gain of runs over their start (one they share, or each its own) on the same held-out tasks,
  with intervals from a bootstrap over the tasks (each run's) and over the runs, then the tasks (the mean's).

scripts/compare_algorithms.py runs a study and prints these; tests/test_study.py checks them on hand-built logs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SUCCESS = "eval/success"


def evaluations(records: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(iteration, held-out success) of every evaluation in a run's records, in order."""
    return [(int(r["iteration"]), float(r[SUCCESS])) for r in records if r.get(SUCCESS) is not None]


def timed_curve(records: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(cumulative training seconds, held-out success) at each evaluation; evaluation time is not counted."""
    seconds, curve = 0.0, []
    for r in records:
        seconds += r.get("time/iteration_s") or 0.0
        if r.get(SUCCESS) is not None:
            curve.append((round(seconds, 1), float(r[SUCCESS])))
    return curve


def success_at(curve: list[tuple[float, float]], seconds: float) -> float | None:
    """The held-out success of the last evaluation at or before `seconds` of training (None: the run ended earlier)."""
    if not curve or curve[-1][0] < seconds:
        return None
    return [success for t, success in curve if t <= seconds][-1]


def success_at_iteration(records: list[dict[str, Any]], iteration: int) -> float | None:
    """The held-out success evaluated at `iteration` (None: not evaluated there)."""
    return dict(evaluations(records)).get(iteration)


def iterations_to(records: list[dict[str, Any]], threshold: float) -> int | None:
    """The first evaluated iteration whose held-out success is at or above `threshold` (None: never)."""
    return next((it for it, success in evaluations(records) if success >= threshold), None)


def credit_means(records: list[dict[str, Any]]) -> dict[str, float]:
    """Each `credit/*` diagnostic averaged over the iterations that logged a value (null ones are skipped)."""
    values: dict[str, list[float]] = {}
    for r in records:
        for key, value in r.items():
            if key.startswith("credit/") and value is not None and np.isfinite(value):
                values.setdefault(key.removeprefix("credit/"), []).append(float(value))
    return {key: float(np.mean(v)) for key, v in values.items()}


def percentile_interval(resampled: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The (1-c)/2 and (1+c)/2 quantiles of a statistic's bootstrap resamples: its percentile interval at c."""
    tail = (1 - confidence) / 2
    low, high = np.quantile(resampled, [tail, 1 - tail])
    return float(low), float(high)


def bootstrap_difference(
    treated: list[float], control: list[float], resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """mean(treated) - mean(control), with a percentile bootstrap interval at `confidence`.

    Each resample draws len(treated) seeds of `treated` and len(control) of `control` with replacement,
    independently; the interval is the (1-c)/2 and (1+c)/2 quantiles of the resampled differences.
    """
    a, b = np.asarray(treated, dtype=float), np.asarray(control, dtype=float)
    if a.size < 2 or b.size < 2:
        raise ValueError("a bootstrap interval needs at least 2 seeds per arm")
    rng = np.random.default_rng(seed)
    diffs = rng.choice(a, (resamples, a.size)).mean(axis=1) - rng.choice(b, (resamples, b.size)).mean(axis=1)
    return float(a.mean() - b.mean()), *percentile_interval(diffs, confidence)


def paired_gains(
    start: np.ndarray, ends: np.ndarray, resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> tuple[list[tuple[float, float, float]], tuple[float, float, float]]:
    """Each run's gain over its start, and their mean gain, with percentile intervals.

    `ends` (S x T) holds each run's end on T held-out tasks (1 won, 0 lost). `start` is either the outcome on the
    same tasks of the start the S runs share (T: RL seeds from one model) or each run's own start (S x T:
    independent starts, each its own build or clone, scripts/reproduce_recipe.py). A run's gain is
    mean_t(end_st - start_st); its interval resamples the T tasks with replacement (the pairs kept). The mean gain
    is mean_s of those; its interval resamples S runs, then T tasks within each, so that it holds both the runs'
    spread (with independent starts: the starts') and the tasks' sampling.
    """
    ends = np.atleast_2d(np.asarray(ends, dtype=float))
    start = np.asarray(start, dtype=float)
    if start.shape not in (ends.shape[1:], ends.shape):
        raise ValueError(f"a start of shape {start.shape} does not pair with ends of shape {ends.shape}")
    diffs = ends - start
    seeds, tasks = diffs.shape
    rng = np.random.default_rng(seed)
    per_seed = []
    for row in diffs:
        resampled = row[rng.integers(0, tasks, (resamples, tasks))].mean(axis=1)
        per_seed.append((float(row.mean()), *percentile_interval(resampled, confidence)))
    chosen = rng.integers(0, seeds, (resamples, seeds))
    picks = rng.integers(0, tasks, (resamples, seeds, tasks))
    mean_resampled = diffs[chosen[:, :, None], picks].mean(axis=(1, 2))
    return per_seed, (float(diffs.mean()), *percentile_interval(mean_resampled, confidence))


def verdict(low: float, high: float) -> str:
    """What a difference interval says: which arm is better, or that they do not separate."""
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "no separation"


def quantile_of(records: list[dict[str, Any]], key: str, q: float) -> float | None:
    """The q-quantile (1.0: the maximum) of a metric over a run's iterations (None: never logged)."""
    values = [float(r[key]) for r in records if r.get(key) is not None]
    return float(np.quantile(values, q)) if values else None


def agent_figures(runs: list[list[dict[str, Any]]]) -> dict[str, dict[str, list[float]]]:
    """A team's figures per agent, one value per run that logged them: the agent's mean advantage over the
    iterations (`rollout/agent/<a>/advantage_mean`) and its held-out success at the last evaluation
    (`eval/agent/<a>/success`)."""
    figures: dict[str, dict[str, list[float]]] = {}
    for records in runs:
        agents = {k.split("/")[2] for r in records for k in r if k.startswith(("rollout/agent/", "eval/agent/"))}
        for agent in sorted(agents):
            mine = figures.setdefault(agent, {"advantage_mean": [], "success": []})
            for figure, key, pick in (
                ("advantage_mean", f"rollout/agent/{agent}/advantage_mean", np.mean),
                ("success", f"eval/agent/{agent}/success", lambda values: values[-1]),
            ):
                values = [float(r[key]) for r in records if r.get(key) is not None]
                if values:
                    mine[figure].append(float(pick(values)))
    return figures
