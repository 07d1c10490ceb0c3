"""Compare GRPO, GiGPO, GRPO+EPO and GRPO+ARPO on `household`, as one Hydra multirun, then report.

    python scripts/compare_algorithms.py --level default --iterations 60
    python scripts/compare_algorithms.py --level search --iterations 100 --seeds 0 1 2
    python scripts/compare_algorithms.py --level search --seeds 1 --threads 1   # one share of a parallel sweep
    python scripts/compare_algorithms.py --level multistep --overrides trainer.mini_batch_size=128

Every configuration trains the embedded tiny model (model=tiny's recipe) on a fixed pool of
`--task-pool` training tasks, so that tasks recur and ARPO's per-task buffer can replay them
(the same pool for every algorithm), and is evaluated on held-out `valid` tasks. Jobs whose
folders land under the same `--out` are pooled by `agentrl report`, which prints the table
(final and best held-out success, iterations to `--threshold`) and writes the learning-curve
PNG. Several invocations with different `--seeds` can share the 2 cores of a small machine
(`--threads 1` each) and still be reported together.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ALGORITHMS = {  # label -> the preset that builds it
    "grpo": "grpo",
    "gigpo": "gigpo",
    "grpo+epo": "epo",
    "grpo+arpo": "arpo",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--level", default="default", help="household level (default, search, ...)")
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS))
    parser.add_argument("--task-pool", type=int, default=128, help="training tasks (ARPO's paper used 128)")
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--eval-tasks", type=int, default=50)
    parser.add_argument("--threshold", type=float, default=0.3, help="held-out success that counts as reached")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per job (OMP_NUM_THREADS)")
    parser.add_argument("--out", default=None, help="default: outputs/compare/<level>")
    parser.add_argument("--report-only", action="store_true", help="only report what is already under --out")
    parser.add_argument("--overrides", nargs="*", default=[], help="extra Hydra overrides for every job")
    args = parser.parse_args()

    out = Path(args.out or f"outputs/compare/{args.level}")
    if not args.report_only:
        presets = ",".join(ALGORITHMS[a] for a in args.algorithms)
        # shards started in the same second must not share a folder: name the algorithms and the seeds
        shard = f"{'-'.join(args.algorithms)}_seeds-{'-'.join(map(str, args.seeds))}"
        sweep_dir = out / time.strftime("%Y-%m-%d_%H-%M-%S") / shard
        command = [
            "agentrl",
            "train",
            "-m",
            f"+algo={presets}",
            f"seed={','.join(map(str, args.seeds))}",
            f"env.level={args.level}",
            f"trainer.task_pool={args.task_pool}",
            f"trainer.iterations={args.iterations}",
            f"trainer.eval_every={args.eval_every}",
            f"trainer.save_every={args.iterations}",
            f"eval.num_tasks={args.eval_tasks}",
            "logger.wandb_mode=disabled",
            "logger.progress=false",
            f"hydra.sweep.dir={sweep_dir}",
            *args.overrides,
        ]
        env = dict(os.environ)
        if args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        print("$", " ".join(command), flush=True)
        started = time.time()
        result = subprocess.run(command, env=env)
        print(f"multirun finished in {time.time() - started:.0f} s (exit {result.returncode})", flush=True)
    report = ["agentrl", "report", str(out), "--threshold", str(args.threshold)]
    print("$", " ".join(report), flush=True)
    sys.exit(subprocess.run(report).returncode)


if __name__ == "__main__":
    main()
