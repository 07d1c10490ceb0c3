"""A seed study of the advantage estimators on household levels, in one command, then its statistics.

    python scripts/compare_algorithms.py                                   # the whole study (see the defaults below)
    python scripts/compare_algorithms.py --levels default --arms grpo gigpo --seeds 0 1 2
    python scripts/compare_algorithms.py --arms grpo grpo+epo grpo+arpo --levels default --iterations 75
    python scripts/compare_algorithms.py --env gem --levels game:Sokoban-v0-easy --overrides +experiment=gem_sokoban
    python scripts/compare_algorithms.py --env tools --levels agentrl.examples.game_2048:Game2048 --overrides \
        env.reward_funcs=[agentrl.examples.game_2048:reward_score] 'env.prompt="Play 2048 with the move tool."' \
        env.expert=agentrl.examples.game_2048:expert env.max_steps=8 env.success_reward=16 \
        rollout.max_prompt_tokens=1024                                    # actions that are tool calls
    python scripts/compare_algorithms.py --report-only                     # the statistics of what is under --out
    python scripts/compare_algorithms.py --env household_team --levels easy --arms trajectory-means rows-global \
        rows-agent --seeds 0 1 2 --sft-episodes 16 --overrides algo.norm=std --out outputs/drmas   # Dr. MAS's arms

Each (level, arm, seed) is one `agentrl train` of the embedded tiny model (model=tiny's recipe) on a fixed
pool of `--task-pool` training tasks (the same pool for every arm; ARPO's buffer needs tasks to recur),
evaluated on `--eval-tasks` held-out tasks every `--eval-every` iterations, into
`<out>/<level>/<arm>/seed<S>`. `--jobs` runs go side by side with `--threads` torch threads each, in
seed-major order so that the machine's load falls evenly on the arms. A run that finished is not run again,
so a study that was stopped goes on where it was. With `--sft-episodes N` every run of a level starts from one
`agentrl sft` on N expert episodes of it (`<out>/<level>/sft/model`) instead of the tiny model's random warm-up.

Per level it then prints and writes (`<out>/study.md`, `<out>/study.json`):
- held-out success per arm at each evaluated iteration and at fixed training times (rollout + update
  seconds, evaluation excluded; the last time every run reached, and half of it), mean ± std over seeds;
- iterations to `--threshold`;
- each arm against `--baseline` (GRPO): the difference of mean final success with a 95 % percentile bootstrap
  interval over seeds, and what it says;
- the step-credit diagnostics (`credit/*`, logged under every estimator), averaged over iterations and seeds;
and `agentrl report <out>/<level>` draws the learning curves (curves.png).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl import metrics_log  # noqa: E402
from agentrl.report import study  # noqa: E402

ARMS = {  # label -> the overrides that build it
    "grpo": ["+algo=grpo"],
    "gigpo": ["+algo=gigpo"],
    "rloo": ["+algo=grpo", "algo.estimator=rloo"],
    "grpo+epo": ["+algo=epo"],
    "grpo+arpo": ["+algo=arpo"],
    # Dr. MAS's three arms (langfengQ/DrMAS#81), for a team environment (--env household_team) with algo.norm=std:
    # its paper's baseline (statistics over trajectory means), the reference code's rows with one global scope,
    # and rows per (task group, agent)
    "trajectory-means": ["+algo=grpo", "algo.episode_stats=episode_means"],
    "rows-global": ["+algo=grpo", "algo.episode_stats=rows"],
    "rows-agent": ["+algo=grpo", "algo.episode_stats=rows", "algo.norm_scope=agent"],
}
# Iterations per level when --iterations is not given. The defaults (two levels, two arms, five seeds, 30
# iterations) are the study that fitted in about an hour on 2 cores; --levels multistep long and --arms rloo
# extend it at about 8 s per iteration per run.
ITERATIONS = {"default": 30, "search": 30, "multistep": 30, "long": 20}
CREDIT_SHOWN = (
    ("step_group_size_1_share", "size 1"),
    ("step_group_size_2_4_share", "2-4"),
    ("step_group_size_5_9_share", "5-9"),
    ("step_group_size_10_plus_share", "10+"),
    ("step_advantage_nonzero_share", "A^S≠0"),
    ("episode_groups_no_signal_share", "no-signal groups"),
    ("episode_advantage_abs_mean", "|A^E|"),
    ("step_advantage_abs_mean", "|A^S|"),
    ("episode_step_advantage_correlation", "corr(A^E,A^S)"),
)


def agentrl_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentrl.cli", *args]


def finished(run_dir: Path, iterations: int) -> bool:
    records = metrics_log.read_records(run_dir)
    return bool(records) and records[-1].get("iteration") == iterations and study.SUCCESS in records[-1]


def level_dir(args: argparse.Namespace, level: str) -> Path:
    name = level.replace(":", "_")  # a GEM id (game:Sokoban-v0-easy) as a folder name
    return args.out / (name if args.env == "household" else f"{args.env}_{name}")


def level_override(args: argparse.Namespace, level: str) -> str:
    """The override that chooses a "level": household's env.level, a GEM id (env=gem: env.id), or a tool
    environment's class (env=tools: env.factory)."""
    key = {"gem": "env.id", "tools": "env.factory"}.get(args.env, "env.level")
    return f"{key}={level}"


def build_model(args: argparse.Namespace, level: str) -> None:
    """Build (or find) the level's cached tiny model once, before the runs that share it."""
    target = args.out / ".build" / level_dir(args, level).name
    result = subprocess.run(
        agentrl_command(
            "train",
            f"env={args.env}",
            level_override(args, level),
            *args.overrides,
            "trainer.iterations=1",
            "trainer.eval_every=0",
            "logger=none",
            "logger.progress=false",
            "trainer.overwrite=true",  # a build that was stopped before left its folder
            f"hydra.run.dir={target}",
        ),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"building the tiny model of level {level} failed:\n{result.stderr[-3000:]}")


def run_job(job: dict, env: dict) -> tuple[dict, int]:
    job["dir"].mkdir(parents=True, exist_ok=True)
    with open(job["dir"] / "train.log", "w") as log:
        result = subprocess.run(job["command"], env=env, stdout=log, stderr=subprocess.STDOUT)
    return job, result.returncode


def warm_start(args: argparse.Namespace, level: str) -> list[str]:
    """With --sft-episodes: `agentrl sft` on that many expert episodes, once per level, and the override that
    starts every run of the level from its model folder (none without)."""
    if not args.sft_episodes:
        return []
    folder = level_dir(args, level) / "sft"
    model = folder / "model"
    if not (model / "config.json").is_file():
        print(f"behaviour cloning on {args.sft_episodes} expert episodes of {args.env} {level}", flush=True)
        result = subprocess.run(
            agentrl_command(
                "sft",
                f"env={args.env}",
                level_override(args, level),
                f"sft.episodes={args.sft_episodes}",
                f"eval.num_tasks={args.eval_tasks}",
                f"hydra.run.dir={folder}",
            ),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise SystemExit(f"agentrl sft on level {level} failed:\n{result.stderr[-3000:]}")
    return [f"model.path={model.resolve()}"]


def plan(args: argparse.Namespace) -> list[dict]:
    jobs = []
    for level in args.levels:
        start = warm_start(args, level)
        iterations = args.iterations or ITERATIONS.get(level, 40)
        for seed in args.seeds:  # seed-major: each seed's arms run close together in time
            for arm in args.arms:
                run_dir = level_dir(args, level) / arm / f"seed{seed}"
                command = agentrl_command(
                    "train",
                    f"env={args.env}",
                    *ARMS[arm],
                    f"seed={seed}",
                    level_override(args, level),
                    f"trainer.task_pool={args.task_pool}",
                    f"trainer.iterations={iterations}",
                    f"trainer.eval_every={args.eval_every}",
                    f"trainer.save_every={iterations}",
                    f"eval.num_tasks={args.eval_tasks}",
                    "logger.wandb_mode=disabled",
                    "logger.progress=false",
                    "trainer.overwrite=true",  # only unfinished runs are run again: from the start
                    f"hydra.run.dir={run_dir}",
                    *start,
                    *args.overrides,
                )
                jobs.append(
                    {
                        "level": level,
                        "arm": arm,
                        "seed": seed,
                        "dir": run_dir,
                        "iterations": iterations,
                        "command": command,
                    }
                )
    return jobs


def run_study(args: argparse.Namespace) -> None:
    jobs = [j for j in plan(args) if not finished(j["dir"], j["iterations"])]
    if not jobs:
        print("every run of the study has finished; reporting")
        return
    for level in dict.fromkeys(j["level"] for j in jobs):
        if not args.sft_episodes:  # (a warm start's runs load its model folder: no tiny model to build)
            print(f"building (or finding) the tiny model of level {level}", flush=True)
            build_model(args, level)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1")
    failed = []
    with Progress() as progress, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        task = progress.add_task(f"{len(jobs)} runs, {args.jobs} at a time", total=len(jobs))
        for job, code in pool.map(lambda j: run_job(j, env), jobs):
            progress.advance(task)
            label = f"{job['level']} {job['arm']} seed {job['seed']}"
            if code != 0:
                failed.append(label)
                progress.console.print(f"[red]failed[/red] {label} (exit {code}): see {job['dir'] / 'train.log'}")
            else:
                progress.console.print(f"done {label}")
    if failed:
        print(f"{len(failed)} runs failed: {', '.join(failed)}; the report leaves them out")


def load_level(level_dir: Path, iterations: int, names: list[str]) -> dict[str, dict[int, list[dict]]]:
    """arm -> seed -> records, for the runs of the arms `names` under <out>/<level> that finished `iterations`;
    the others are named."""
    arms: dict[str, dict[int, list[dict]]] = {}
    for run_dir in sorted(p for name in names for p in (level_dir / name).glob("seed*")):
        if finished(run_dir, iterations):
            records = metrics_log.read_records(run_dir)
            arms.setdefault(run_dir.parent.name, {})[int(run_dir.name.removeprefix("seed"))] = records
        else:
            print(f"left out, not finished: {run_dir}")
    return arms


def fmt(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    spread = f" ± {np.std(known, ddof=1):.2f}" if len(known) > 1 else ""
    missing = "" if len(known) == len(values) else f" ({len(known)}/{len(values)})"
    return f"{np.mean(known):.2f}{spread}{missing}"


def summarise_level(level: str, arms: dict[str, dict[int, list[dict]]], baseline: str, threshold: float) -> dict:
    seeds = sorted(set.intersection(*(set(runs) for runs in arms.values())))  # paired: the seeds every arm has
    iterations = sorted(set.intersection(*(set(dict(study.evaluations(r))) for a in arms.values() for r in a.values())))
    curves = {arm: {s: study.timed_curve(arms[arm][s]) for s in seeds} for arm in arms}
    reached = min(c[-1][0] for runs in curves.values() for c in runs.values())
    times = [round(reached / 2), int(reached)]
    summary = {"level": level, "seeds": seeds, "iterations": iterations, "seconds": times, "arms": {}}
    for arm, runs in arms.items():
        finals = [study.evaluations(runs[s])[-1][1] for s in seeds]
        summary["arms"][arm] = {
            "final": finals,
            "at_iteration": {it: [study.success_at_iteration(runs[s], it) for s in seeds] for it in iterations},
            "at_seconds": {t: [study.success_at(curves[arm][s], t) for s in seeds] for t in times},
            "to_threshold": [study.iterations_to(runs[s], threshold) for s in seeds],
            "seconds_per_iteration": float(
                np.mean([r["time/iteration_s"] for s in seeds for r in runs[s] if r.get("time/iteration_s")])
            ),
            "grad_norm_p95": [study.quantile_of(runs[s], "train/grad_norm", 0.95) for s in seeds],
            "grad_norm_max": [study.quantile_of(runs[s], "train/grad_norm", 1.0) for s in seeds],
            "agents": study.agent_figures([runs[s] for s in seeds]),
            "credit": {
                key: float(np.mean(v))
                for key in dict(CREDIT_SHOWN)
                if (v := [m[key] for s in seeds if key in (m := study.credit_means(runs[s]))])
            },
        }
    if baseline in arms and len(seeds) >= 2:
        control = summary["arms"][baseline]
        for arm, figures in summary["arms"].items():
            if arm == baseline:
                continue
            comparisons = {"final": (figures["final"], control["final"])}
            t = times[-1]
            if None not in figures["at_seconds"][t] + control["at_seconds"][t]:
                comparisons[f"at {t} s"] = (figures["at_seconds"][t], control["at_seconds"][t])
            figures["against_" + baseline] = {
                name: dict(
                    zip(("difference", "low", "high"), (d := study.bootstrap_difference(a, b))),
                    verdict=study.verdict(d[1], d[2]),
                )
                for name, (a, b) in comparisons.items()
            }
    return summary


def markdown(summary: dict, baseline: str, threshold: float) -> str:
    arms = summary["arms"]
    head = (
        ["arm"]
        + [f"it {it}" for it in summary["iterations"]]
        + [f"{t} s" for t in summary["seconds"]]
        + [f"iters to ≥ {threshold:g}", "s/iter"]
    )
    lines = [
        f"### `{summary['level']}`: held-out success, mean ± std over seeds {summary['seeds']}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for arm, f in arms.items():
        reached = [x for x in f["to_threshold"] if x is not None]
        to = (
            f"{np.mean(reached):.0f} ({len(reached)}/{len(f['to_threshold'])})"
            if reached
            else f"never (0/{len(f['to_threshold'])})"
        )
        cells = (
            [fmt(f["at_iteration"][it]) for it in summary["iterations"]]
            + [fmt(f["at_seconds"][t]) for t in summary["seconds"]]
            + [to, f"{f['seconds_per_iteration']:.2f}"]
        )
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    comparisons = [(arm, name, c) for arm, f in arms.items() for name, c in f.get("against_" + baseline, {}).items()]
    if comparisons:
        lines += [
            "",
            f"| against {baseline} | difference of means | 95 % bootstrap interval | verdict |",
            "|---|---|---|---|",
        ]
        for arm, name, c in comparisons:
            lines.append(
                f"| {arm}, {name} | {c['difference']:+.3f} | [{c['low']:+.3f}, {c['high']:+.3f}] | {c['verdict']} |"
            )
    agents = sorted({a for f in arms.values() for a in f["agents"]})
    if agents:  # a team: Dr. MAS's figures
        head = ["arm", "grad norm p95", "grad norm max"] + [f"{a}: mean advantage, final success" for a in agents]
        lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for arm, f in arms.items():
            cells = [fmt(f["grad_norm_p95"]), fmt(f["grad_norm_max"])]
            for a in agents:
                figures = f["agents"].get(a, {})
                cells.append(f"{fmt(figures.get('advantage_mean', []))}, {fmt(figures.get('success', []))}")
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| step credit (mean over iterations and seeds) | " + " | ".join(label for _, label in CREDIT_SHOWN) + " |",
        "|" + "---|" * (len(CREDIT_SHOWN) + 1),
    ]
    for arm, f in arms.items():
        lines.append(
            f"| {arm} | "
            + " | ".join(f"{f['credit'][k]:.2f}" if k in f["credit"] else "-" for k, _ in CREDIT_SHOWN)
            + " |"
        )
    return "\n".join(lines) + "\n"


def report(args: argparse.Namespace) -> None:
    summaries, texts = [], []
    for level in args.levels:
        arms = load_level(level_dir(args, level), args.iterations or ITERATIONS.get(level, 40), args.arms)
        if not arms:
            print(f"no finished runs under {level_dir(args, level)}")
            continue
        summary = summarise_level(level_dir(args, level).name, arms, args.baseline, args.threshold)
        summaries.append(summary)
        texts.append(markdown(summary, args.baseline, args.threshold))
        print(texts[-1], flush=True)
        subprocess.run(
            agentrl_command("report", str(level_dir(args, level)), "--threshold", str(args.threshold)),
            capture_output=True,
        )
    if summaries:
        (args.out / "study.md").write_text("\n".join(texts))
        (args.out / "study.json").write_text(json.dumps(summaries, indent=1, default=str))
        print(f"written: {args.out / 'study.md'}, {args.out / 'study.json'}, {args.out}/<level>/curves.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--env",
        default="household",
        help="household, household_team for Dr. MAS's arms, gem (--levels are then GEM ids: game:Sokoban-v0-easy) or "
        "tools (--levels are then env.factory classes: agentrl.examples.game_2048:Game2048)",
    )
    parser.add_argument("--levels", nargs="+", default=["default", "search"])
    parser.add_argument("--arms", nargs="+", default=["grpo", "gigpo"], choices=list(ARMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--iterations", type=int, default=None, help=f"every level's; default per level: {ITERATIONS}")
    parser.add_argument("--task-pool", type=int, default=128, help="training tasks (ARPO's paper used 128)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-tasks", type=int, default=50)
    parser.add_argument("--threshold", type=float, default=0.3, help="held-out success that counts as reached")
    parser.add_argument("--baseline", default="grpo", help="the arm the others are compared with")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)), help="runs side by side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (OMP_NUM_THREADS)")
    parser.add_argument("--out", type=Path, default=Path("outputs/compare"))
    parser.add_argument(
        "--sft-episodes",
        type=int,
        default=0,
        help="start every run from `agentrl sft` on this many expert episodes of its level (0: the tiny model)",
    )
    parser.add_argument("--report-only", action="store_true", help="only report what is already under --out")
    parser.add_argument("--overrides", nargs="*", default=[], help="extra Hydra overrides for every run")
    args = parser.parse_args()
    if args.baseline not in args.arms:
        parser.error(f"--baseline {args.baseline} is not among --arms {args.arms}")
    if not args.report_only:
        run_study(args)
    report(args)


if __name__ == "__main__":
    main()
