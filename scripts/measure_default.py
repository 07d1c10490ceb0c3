"""Does the embedded default learn? Train `agentrl train` per seed and compare held-out success.

For each seed it runs the real CLI (`agentrl train seed=S`, plus any extra overrides), times it, and
reads metrics.jsonl: held-out success of the starting model (iteration 0) and of the final
checkpoint. The random admissible baseline is evaluated on the same held-out tasks with the same
protocol. The tiny model is built once before the timed runs (its build is cached and is not part
of the training budget).

    python scripts/measure_default.py --seeds 0 1 2
    python scripts/measure_default.py --seeds 0 --overrides env.level=easy trainer.iterations=50
    python scripts/measure_default.py --out outputs/schedule/minibatch --overrides trainer.mini_batch_size=64

Held-out success is also read at fixed training times (`--at-seconds`): the success of the last evaluation
whose cumulative training time (rollout + update of every iteration so far, evaluations excluded) is at or
below each time, so schedules that spend different time per iteration compare at equal cost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from agentrl import metrics_log
from agentrl.report.study import success_at, timed_curve


def train(seed: int, out: Path, overrides: list[str]) -> dict:
    run_dir = out / f"seed{seed}"
    started = time.time()
    cmd = [
        sys.executable,
        "-m",
        "agentrl.cli",
        "train",
        f"seed={seed}",
        "logger.progress=false",
        "trainer.overwrite=true",  # a measurement replaces the last one in its folder
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.time() - started
    if result.returncode != 0:
        raise SystemExit(f"seed {seed} failed:\n{result.stderr[-3000:]}")
    records = metrics_log.read_records(run_dir)
    evals = [r for r in records if "eval/success" in r]
    return {
        "seed": seed,
        "wall_seconds": round(seconds, 1),
        "start_success": evals[0]["eval/success"],
        "final_success": evals[-1]["eval/success"],
        "best_success": max(r["eval/success"] for r in evals),
        "curve": [(r["iteration"], r["eval/success"]) for r in evals],
        "timed_curve": timed_curve(records),
        "iterations": records[-1]["iteration"],
        "mean_iteration_s": float(np.mean([r["time/iteration_s"] for r in records if "time/iteration_s" in r])),
    }


def random_baseline(overrides: list[str], out: Path) -> float:
    """The random admissible policy on the same held-out tasks, through `agentrl eval --random`."""
    env_overrides = [o for o in overrides if o.startswith(("env", "eval"))]
    target = out / "random"
    cmd = [
        sys.executable,
        "-m",
        "agentrl.cli",
        "eval",
        "--random",
        f"output={target}",
        f"hydra.run.dir={target}",
        *env_overrides,
    ]
    # the default eval protocol of model=tiny: 100 held-out tasks
    if not any(o.startswith("eval.num_tasks") for o in env_overrides):
        cmd.append("eval.num_tasks=100")
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"random baseline failed:\n{result.stderr[-3000:]}")
    return json.loads((target / "eval.json").read_text())["metrics"]["eval/success"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("outputs/measure_default"))
    parser.add_argument("--overrides", nargs="*", default=[], help="extra Hydra overrides for every run")
    parser.add_argument("--at-seconds", type=float, nargs="*", default=[60, 120, 180, 240, 300])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    # Build (or find) the cached tiny model outside the timed runs.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrl.cli",
            "train",
            *args.overrides,
            "trainer.iterations=1",  # after the overrides, which may set their own iterations
            "trainer.eval_every=0",
            "logger=none",
            "logger.progress=false",
            "trainer.overwrite=true",
            f"hydra.run.dir={args.out / 'build'}",
        ],
        check=True,
        capture_output=True,
    )

    runs = [train(seed, args.out, args.overrides) for seed in args.seeds]
    baseline = random_baseline(args.overrides, args.out)
    at = {str(int(t)): [success_at(r["timed_curve"], t) for r in runs] for t in args.at_seconds}
    summary = {"overrides": args.overrides, "random_baseline": baseline, "runs": runs, "success_at_seconds": at}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))

    print(f"{'seed':>4} {'wall s':>7} {'s/iter':>6} {'start':>6} {'final':>6} {'best':>6}")
    for r in runs:
        print(
            f"{r['seed']:>4} {r['wall_seconds']:>7.0f} {r['mean_iteration_s']:>6.2f} {r['start_success']:>6.2f} "
            f"{r['final_success']:>6.2f} {r['best_success']:>6.2f}"
        )
    for t, values in at.items():
        known = [v for v in values if v is not None]
        shown = " ".join("  -  " if v is None else f"{v:.2f}" for v in values)
        mean = f"mean {np.mean(known):.3f}" if len(known) == len(values) else "(a run ended earlier)"
        print(f"held-out success after {t:>4} s of training: {shown}  {mean}")
    finals = [r["final_success"] for r in runs]
    print(
        f"final held-out success {np.mean(finals):.3f} ± {np.std(finals):.3f} over {len(runs)} seeds; "
        f"random admissible baseline {baseline:.3f}; summary in {args.out / 'summary.json'}"
    )


if __name__ == "__main__":
    main()
