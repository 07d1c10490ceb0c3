"""Tool use of tool-calling runs (env=tools) for `agentrl report`: each iteration of such a run logs its rollout's
tool calls and tool errors (agentrl/envs/tools_env.py), the errors by kind where there were any
(`rollout/tool_errors/<kind>`), and its episodes' mean length in turns."""

from __future__ import annotations

import math
from typing import Any

TOOL_CALLS, TOOL_ERRORS, TURNS = "rollout/tool_calls", "rollout/tool_errors", "rollout/episode_length"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run_tool_use(records: list[dict]) -> dict[str, float]:
    """One run's `tool_calls`, `tool_errors` and `tool_errors/<kind>` summed over its iterations, `error_share`
    (errors over calls) and `turns_per_episode` (rollout/episode_length's mean over those iterations); empty where
    it logged no rollout/tool_calls."""
    records = [r for r in records if _finite(r.get(TOOL_CALLS))]
    if not records:
        return {}
    totals: dict[str, float] = {}
    for record in records:
        for key, value in record.items():
            if (key == TOOL_CALLS or key.startswith(TOOL_ERRORS)) and _finite(value):
                name = key.removeprefix("rollout/")
                totals[name] = totals.get(name, 0.0) + value
    totals["error_share"] = totals.get("tool_errors", 0.0) / totals["tool_calls"] if totals["tool_calls"] else 0.0
    turns = [r[TURNS] for r in records if _finite(r.get(TURNS))]
    if turns:
        totals["turns_per_episode"] = sum(turns) / len(turns)
    return totals


def tool_use(runs: list[list[dict]]) -> dict[str, dict]:
    """`run_tool_use` over the runs (each its metrics records) that called tools, as {name: {mean, std}}: sample std
    (ddof=1), None with one run. A kind of error a run never met counts 0 there: a kind is logged only where it
    occurred."""
    import statistics

    per_run = [use for records in runs if (use := run_tool_use(records))]
    names = sorted({name for use in per_run for name in use})
    out = {}
    for name in names:
        values = [use.get(name, 0.0) for use in per_run]
        std = statistics.stdev(values) if len(values) > 1 else None
        out[name] = {"mean": statistics.fmean(values), "std": std}
    return out
