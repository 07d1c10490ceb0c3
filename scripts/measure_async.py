"""Iteration throughput with rollouts ahead of the update (`rollout.max_staleness=K`), side by side.

For each environment step latency (`env.step_latency_s`, 0: the embedded default as it is) and each K, it trains
the default (`agentrl train seed=S`, plus any extra overrides) for a few iterations with no held-out evaluation
between, and reads metrics.jsonl: the iterations' time (`time/iteration_s`: the wait for the rows, their scoring
and the update), from the second iteration on (the first has nothing to overlap), and each side's busy share of
it: the update's (`time/update_s`), and the rollout's (K=0: `time/rollout_s`, which the update waits for; K>=1:
the worker's generation, `time/rollout_busy_s`). The speed-up is K=0's time per iteration over K's.

    python scripts/measure_async.py
    python scripts/measure_async.py --latency 0 0.004 --staleness 0 1 2 --iterations 12
    python scripts/measure_async.py --overrides env.num_workers=2

The table is printed and written, with every run's figures, to <out>/async.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from agentrl import metrics_log


def train(out: Path, latency: float, staleness: int, iterations: int, seed: int, overrides: list[str]) -> dict:
    run_dir = out / f"latency{latency:g}_k{staleness}"
    cmd = [
        sys.executable,
        "-m",
        "agentrl.cli",
        "train",
        f"seed={seed}",
        f"env.step_latency_s={latency}",
        f"rollout.max_staleness={staleness}",
        f"trainer.iterations={iterations}",
        f"trainer.eval_every={iterations}",  # held-out at the start and the end only: not inside the timed span
        f"trainer.save_every={iterations}",
        "eval.num_tasks=8",
        "logger.progress=false",
        "trainer.overwrite=true",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    started = time.time()
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"latency {latency:g}, K={staleness} failed:\n{result.stderr[-3000:]}")
    records = [r for r in metrics_log.read_records(run_dir) if "time/iteration_s" in r and r["iteration"] >= 2]
    total = sum(r["time/iteration_s"] for r in records)
    rollout_key = "time/rollout_busy_s" if staleness else "time/rollout_s"
    return {
        "latency_s": latency,
        "max_staleness": staleness,
        "iterations_timed": len(records),
        "seconds_per_iteration": total / len(records),
        "update_busy_share": sum(r["time/update_s"] for r in records) / total,
        "rollout_busy_share": sum(r.get(rollout_key, 0.0) for r in records) / total,
        "staleness_mean": sum(r.get("async/staleness", 0.0) for r in records) / len(records),
        "wall_seconds": round(time.time() - started, 1),
        "run_dir": str(run_dir),
    }


def table(rows: list[dict]) -> str:
    base = {r["latency_s"]: r["seconds_per_iteration"] for r in rows if r["max_staleness"] == 0}
    lines = [
        "| env.step_latency_s | K | s / iteration | speed-up over K=0 | update busy | rollout busy | staleness |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        speedup = base.get(r["latency_s"], float("nan")) / r["seconds_per_iteration"]
        lines.append(
            f"| {r['latency_s']:g} | {r['max_staleness']} | {r['seconds_per_iteration']:.2f} | {speedup:.2f}x | "
            f"{r['update_busy_share']:.2f} | {r['rollout_busy_share']:.2f} | {r['staleness_mean']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.004], help="env.step_latency_s values")
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2], help="rollout.max_staleness values")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("outputs/measure_async"))
    parser.add_argument("--overrides", nargs="*", default=[], help="more agentrl train overrides")
    args = parser.parse_args()
    if args.iterations < 3:
        parser.error("--iterations must be at least 3 (the first iteration is not timed)")
    rows = []
    for latency in args.latency:
        for staleness in args.staleness:
            rows.append(train(args.out, latency, staleness, args.iterations, args.seed, args.overrides))
            print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "async.json").write_text(json.dumps({"command": sys.argv, "runs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
