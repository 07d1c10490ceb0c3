"""One command that reproduces a recipe's row of docs/benchmarks.md over independent starts.

    python scripts/reproduce_recipe.py gem_2048 --starts 0 1 2
    python scripts/reproduce_recipe.py gem_sokoban --starts 0 1 2 --dry-run      # the commands; nothing runs
    python scripts/reproduce_recipe.py gem_2048 --starts 0 1 --tasks 10 --overrides model.tiny.warmup_steps=30 \
        --sft-overrides sft.episodes=20 --train-overrides trainer.iterations=2      # a quick check of the wiring

A recipe's header (conf/experiment/NAME.yaml) gives the commands of one start (the `# start S` block read by
agentrl/cli/recipes.py): `agentrl sft ...` then `agentrl train ... model.path=<its sft model>`, or `agentrl train ...`
alone where RL starts from the tiny model's build. `seed=S` in each seeds the whole start: the build (the GEM
recipes set model.tiny.seed to ${seed}), the clone and RL. For each start S this script runs them with seed=S, then
`agentrl eval` of the start (the clone, or the build) and of the end (the run's last checkpoint) on the same held-out
tasks, and prints the row: per start the build's, the start's and the end's held-out success, the gain with a 95 %
interval from a paired bootstrap over the tasks, held-out success through training and the wall times; then the
mean, whose interval resamples the starts, then the tasks within each (agentrl/report/study.py, `paired_gains`),
and the mean end with the same resampling of the ends (to set beside a baseline such as random play); then the
machine (CPU model), commit and torch threads.

Each start's folders and logs are under --out/start_S/ (sft/, train/, eval_start/, eval_end/, one .log a phase);
the row and what it came from go to --out/reproduce.json. A phase that finished is not run again, so a stopped
reproduction goes on where it was with the same --out (an unfinished phase's folder is cleared and run anew).
--overrides go to every sft and train command (and to the evaluation of a build: its env.* and eval.* ones),
--sft-overrides and --train-overrides to one of them, after the header's, so they win. --tasks sets eval.num_tasks
of training's evaluations and of both `agentrl eval`s (default: the recipe's); the sft's own evaluations keep their
command's. --threads sets OMP_NUM_THREADS (torch's threads) for every phase; by default a run takes the cores.

--against FOLDER compares the ends with another reproduction's over the same starts and tasks (its --out, with its
reproduce.json; the same recipe with a control's overrides, say): per start the difference of the ends with a paired
bootstrap interval over the tasks, and their mean over the starts.

    python scripts/reproduce_recipe.py smollm2_calculator_cpu --starts 0 1 2 --out outputs/control --overrides \
        env.factory=agentrl.examples.calculator:ArithmeticQuestion env.expert=agentrl.examples.calculator:direct_expert \
        "env.prompt=Answer with the number only."                                # the calculator without its tool
    python scripts/reproduce_recipe.py smollm2_calculator_cpu --starts 0 1 2 --against outputs/control
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's agentrl and scripts, here and (PYTHONPATH) in every phase

PHASES = "phases.json"  # <start folder>/phases.json: each finished phase's seconds (and the build's folder)
BUILT = "the tiny model's folder: "  # the build phase's line that names its folder


def fail(line: str) -> None:
    sys.exit(f"reproduce_recipe: {line}")


def start_commands(name: str) -> tuple[str | None, str]:
    """The recipe's start commands, as its header writes them: (`agentrl sft ...` or None, `agentrl train ...`)."""
    from agentrl.cli.recipes import SFT_MODEL, START_PREFIX, START_SEED, experiments_folder, read_recipe

    path = experiments_folder() / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        fail(f"no recipe {name!r} in {path.parent} (known: {known})")
    commands = read_recipe(path).start
    if not commands:
        fail(
            f"{path} gives no commands of a start (a '{START_PREFIX}' block in its header), so it cannot be reproduced"
        )
    kinds = [command.split()[:2] for command in commands]
    if kinds not in ([["agentrl", "train"]], [["agentrl", "sft"], ["agentrl", "train"]]) or not all(
        START_SEED in command.split() for command in commands
    ):
        fail(f"{path}: a start is `agentrl sft ...` then `agentrl train ...`, or `agentrl train ...`, each with seed=S")
    sft, train = (commands[0] if len(commands) == 2 else None), commands[-1]
    if (sft is not None) != (f"model.path={SFT_MODEL}" in train):
        fail(f"{path}: the train command takes model.path={SFT_MODEL} exactly where an sft command comes first")
    return sft, train


def override_value(path: Path) -> str:
    """A path as a Hydra override's value: quoted only where it holds what Hydra would read as syntax."""
    from agentrl.hydra_paths import hydra_quote

    return str(path) if re.fullmatch(r"[\w./@+-]+", str(path)) else hydra_quote(str(path))


def for_start(command: str, seed: int, sft_model: Path | None = None) -> list[str]:
    """A header command's arguments after `agentrl sft|train` for start `seed`: seed=S and <its sft model> filled in
    (without a model, the model.path=<its sft model> argument is left out)."""
    from agentrl.cli.recipes import SFT_MODEL, START_SEED

    if sft_model is not None:
        command = command.replace(SFT_MODEL, shlex.quote(override_value(sft_model)))
    else:
        command = command.replace(f"model.path={SFT_MODEL}", "")
    return [f"seed={seed}" if word == START_SEED else word for word in shlex.split(command)[2:]]


def is_eval_setting(arg: str) -> bool:
    """An override that an `agentrl eval +experiment=NAME` of a build takes: the recipe, env, env.*, eval.*."""
    key = arg.split("=", 1)[0].lstrip("+~")
    return "=" in arg and (key in ("experiment", "env") or key.startswith(("env.", "eval.")))


def plan(args: argparse.Namespace, seed: int) -> dict:
    """The phases of one start, in order: name -> the agentrl arguments (`build` is done here, not by a command)."""
    sft, train = start_commands(args.recipe)
    folder = args.out / f"start_{seed}"
    tasks = [f"eval.num_tasks={args.tasks}"]
    # both evaluations on those tasks, and on the hardware settings RL ran with (its precision)
    evaluation = [*tasks, *(a for a in for_start(train, seed) if a.startswith("hardware"))]
    phases: dict[str, list[str]] = {}
    if sft is not None:
        start_model = folder / "sft" / "model"  # agentrl sft's <run folder>/model
        phases["sft"] = ["sft", *for_start(sft, seed), *args.overrides, *args.sft_overrides]
        phases["sft"].append(f"hydra.run.dir={override_value(folder / 'sft')}")
        start_eval = [override_value(start_model)]
    else:  # RL starts from the build: built here, then evaluated on the recipe's env, at training's reply lengths
        train_args = [*for_start(train, seed), *args.overrides, *args.train_overrides]
        phases["build"] = train_args
        start_eval = ["<the build>", *(a for a in train_args if is_eval_setting(a)), *rollout_lengths(train_args)]
        start_model = None
    phases["eval_start"] = ["eval", *start_eval, *evaluation, f"hydra.run.dir={override_value(folder / 'eval_start')}"]
    run = folder / "train"
    phases["train"] = ["train", *for_start(train, seed, start_model), *args.overrides, *args.train_overrides, *tasks]
    phases["train"].append(f"hydra.run.dir={override_value(run)}")
    phases["eval_end"] = [
        "eval",
        override_value(run),
        *evaluation,
        f"hydra.run.dir={override_value(folder / 'eval_end')}",
    ]
    return phases


def composed(train_args: list[str]):
    """The typed train config of these arguments, as `agentrl train` composes it."""
    from agentrl.config.store import compose_config
    from agentrl.config.typed import typed

    return typed(compose_config("train", train_args))


def rollout_lengths(train_args: list[str]) -> list[str]:
    """Training's reply and prompt lengths: a build folder carries no run config for `agentrl eval` to take them
    from, and its evaluation must generate as training's evaluator does."""
    rollout = composed(train_args).rollout
    return [
        f"rollout.max_new_tokens={rollout.max_new_tokens}",
        f"rollout.max_prompt_tokens={rollout.max_prompt_tokens}",
    ]


def default_tasks(name: str) -> int:
    _, train = start_commands(name)
    return composed(for_start(train, 0)).eval.num_tasks


def build(train_args: list[str]) -> None:
    """Build the tiny model `agentrl train` with these arguments would build, and print its folder (run as a phase's
    process, so that its log goes to the phase's file; the train command then finds the same folder in the cache)."""
    import logging

    from agentrl.cpu import set_torch_threads
    from agentrl.models.tiny import ensure_tiny_model

    logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(message)s")
    set_torch_threads()
    cfg = composed(train_args)
    print(f"{BUILT}{ensure_tiny_model(cfg.model.tiny, cfg.env)}", flush=True)


def run_start(args: argparse.Namespace, seed: int, child_env: dict) -> dict:
    """Run (or finish) one start's phases; what they took, by phase."""
    folder = args.out / f"start_{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    record_path = folder / PHASES
    done = json.loads(record_path.read_text()) if record_path.is_file() else {}
    for phase, words in plan(args, seed).items():
        if phase in done:
            continue
        target = folder / phase
        if target.exists():  # a phase stopped half-way: its folder is made anew
            shutil.rmtree(target)
        log = folder / f"{phase}.log"
        print(f"{time.strftime('%H:%M:%S')} start {seed}: {phase} ... (log {log})", flush=True)
        started = time.perf_counter()
        if phase == "build":
            script = str(Path(__file__).resolve())
            cmd = [sys.executable, "-c", f"import runpy, sys; runpy.run_path({script!r})['build'](sys.argv[1:])"]
        else:
            cmd = [sys.executable, "-m", "agentrl.cli"]
        if phase == "eval_start" and "build_folder" in done:
            words = [override_value(Path(done["build_folder"])) if w == "<the build>" else w for w in words]
        with log.open("w") as out:
            code = subprocess.run([*cmd, *words], stdout=out, stderr=subprocess.STDOUT, env=child_env).returncode
        lines = log.read_text(errors="replace").strip().splitlines()
        if code != 0:
            fail(f"start {seed}: {phase} failed (exit {code}): {lines[-1] if lines else ''} (log {log})")
        if phase == "build":
            done["build_folder"] = next(line for line in lines if line.startswith(BUILT)).removeprefix(BUILT)
        done[phase] = round(time.perf_counter() - started, 1)
        record_path.write_text(json.dumps(done, indent=2))
        print(f"{time.strftime('%H:%M:%S')} start {seed}: {phase} done in {done[phase]:,.0f} s", flush=True)
    return done


def start_figures(folder: Path, seconds: dict) -> dict:
    """One start's figures from its folders: outcomes per task, the build's held-out success, the training curve."""
    import numpy as np

    from agentrl import metrics_log
    from agentrl.report.study import evaluations
    from scripts.held_out_gain import aligned, outcomes

    start = outcomes(folder / "eval_start")
    end = aligned(start, outcomes(folder / "eval_end"), folder / "eval_end")
    sft_record = folder / "sft" / "sft.json"
    build = json.loads(sft_record.read_text()).get("before", {}).get("eval/success") if sft_record.is_file() else None
    records = metrics_log.read_records(folder / "train")
    steps = [r["time/iteration_s"] for r in records if r.get("time/iteration_s") is not None]
    return {
        "tasks": sorted(start),
        "start_outcomes": [start[t] for t in sorted(start)],
        "end_outcomes": end,
        "build": build,  # the sft's evaluation before cloning (None: no sft, or it did not evaluate before)
        "curve": evaluations(records),  # (iteration, held-out success) of training's own evaluations
        "iteration_s": float(np.median(steps)) if steps else None,
        "train_s": seconds["train"],
        "all_in_s": round(sum(v for k, v in seconds.items() if k != "build_folder"), 1),
    }


def gains_over_starts(figures: list[dict]) -> tuple[list[tuple[float, float, float]], tuple[float, float, float]]:
    """Each start's gain over its own start and the mean's, with intervals: a paired bootstrap over the tasks
    (each start's) and over the starts, then the tasks (the mean's)."""
    import numpy as np

    from agentrl.report.study import paired_gains

    if any(f["tasks"] != figures[0]["tasks"] for f in figures):
        fail("the starts were evaluated on different held-out tasks; give them the same --tasks")
    starts = np.array([f["start_outcomes"] for f in figures])
    ends = np.array([f["end_outcomes"] for f in figures])
    return paired_gains(starts, ends)


def mean_end(figures: list[dict]) -> tuple[float, float, float]:
    """The mean end over the starts with its interval: the ends alone resampled as the mean gain is (the starts, then
    the tasks within each), to set beside a baseline such as random play."""
    import numpy as np

    from agentrl.report.study import paired_gains

    ends = np.array([f["end_outcomes"] for f in figures], dtype=float)
    return paired_gains(np.zeros_like(ends), ends)[1]


def table(seeds: list[int], figures: list[dict], gains, mean) -> list[str]:
    """The row as docs/benchmarks.md gives it: a markdown table, a line a start and the mean."""

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    head = "| start | build | start held-out | held-out through training | end | gain | 95 % interval | RL wall time "
    lines = [head + "| s an iteration | all in |", "|" + "---|" * 10]
    for seed, f, (gain, low, high) in zip(seeds, figures, gains):
        curve = " / ".join(f"{success:.2f}" for _, success in f["curve"])
        step = "-" if f["iteration_s"] is None else f"{f['iteration_s']:.1f}"
        lines.append(
            f"| {seed} | {share(f['build'])} | {share(sum(f['start_outcomes']) / len(f['tasks']))} | {curve} "
            f"| {share(sum(f['end_outcomes']) / len(f['tasks']))} | {gain:+.2f} | [{low:+.2f}, {high:+.2f}] "
            f"| {f['train_s']:,.0f} s | {step} | {f['all_in_s']:,.0f} s |"
        )
    if len(figures) > 1:
        builds = [f["build"] for f in figures if f["build"] is not None]

        def mean_of(key: str) -> float:
            return sum(sum(f[key]) for f in figures) / sum(len(f["tasks"]) for f in figures)

        gain, low, high = mean
        lines.append(
            f"| mean of {len(figures)} | {share(sum(builds) / len(builds) if builds else None)} "
            f"| {share(mean_of('start_outcomes'))} | | **{mean_of('end_outcomes'):.3f}** | **{gain:+.2f}** "
            f"| **[{low:+.2f}, {high:+.2f}]** | | | |"
        )
    return lines


def against_lines(seeds: list[int], figures: list[dict], other: Path) -> list[str]:
    """Each start's end minus the end of the same start in another reproduction (`--against`), paired over the
    tasks, and the mean over the starts (agentrl/report/study.py, `paired_gains`, with the other's ends as start)."""
    import numpy as np

    from agentrl.report.study import paired_gains

    theirs = json.loads((other / "reproduce.json").read_text())  # there: parse() checked it before any work
    missing = [seed for seed in seeds if str(seed) not in theirs["starts"]]
    if missing:
        fail(f"--against {other}: it has no start {missing[0]}; compare the starts both reproductions ran")
    rivals = [theirs["starts"][str(seed)] for seed in seeds]
    if any(r["tasks"] != f["tasks"] for r, f in zip(rivals, figures)):
        fail(f"--against {other}: its starts were evaluated on other held-out tasks")
    differences, mean = paired_gains(
        np.array([r["end_outcomes"] for r in rivals]), np.array([f["end_outcomes"] for f in figures])
    )
    head = "| start | end here | end there | difference | 95 % interval |"
    lines = [f"Against {other} ({theirs['command']}):", "", head, "|---|---|---|---|---|"]
    for seed, f, r, (gain, low, high) in zip(seeds, figures, rivals, differences):
        here, there = sum(f["end_outcomes"]) / len(f["tasks"]), sum(r["end_outcomes"]) / len(r["tasks"])
        lines.append(f"| {seed} | {here:.2f} | {there:.2f} | {gain:+.2f} | [{low:+.2f}, {high:+.2f}] |")
    gain, low, high = mean
    lines.append(f"| mean of {len(seeds)} | | | **{gain:+.2f}** | **[{low:+.2f}, {high:+.2f}]** |")
    return lines


def machine_line() -> str:
    from agentrl.cpu import available_cores, busy_cores, cpu_model
    from agentrl.tracking import git_revision

    cores = available_cores()
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    threads = f"{given} (OMP_NUM_THREADS)" if given else f"{cores} (the cores available)"
    return (
        f"{time.strftime('%Y-%m-%d')}, {cores}-core {cpu_model()}, {busy_cores(0.5):.1f} cores busy with other work "
        f"at the start; commit {git_revision(REPO) or 'unknown (not a git checkout)'}; torch threads a run: {threads}"
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="a recipe of conf/experiment (+experiment=NAME) whose header gives a start")
    parser.add_argument("--starts", type=int, nargs="+", default=[0, 1, 2], help="the starts' seeds (seed=S)")
    parser.add_argument("--tasks", type=int, default=None, help="eval.num_tasks (default: the recipe's)")
    parser.add_argument("--out", type=Path, default=None, help="default: outputs/reproduce/RECIPE/<date>_<time>")
    parser.add_argument("--dry-run", action="store_true", help="print each start's commands and run nothing")
    parser.add_argument("--threads", type=int, default=None, help="torch threads a run (OMP_NUM_THREADS)")
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides for every sft and train command")
    parser.add_argument("--sft-overrides", nargs="*", default=[], help="Hydra overrides for the sft command")
    parser.add_argument("--train-overrides", nargs="*", default=[], help="Hydra overrides for the train command")
    parser.add_argument("--against", type=Path, default=None, help="another reproduction's --out to compare ends with")
    args = parser.parse_args()
    if len(set(args.starts)) != len(args.starts):
        fail(f"--starts {' '.join(map(str, args.starts))} names a start twice")
    if args.tasks is not None and args.tasks < 1:
        fail(f"--tasks {args.tasks}: at least 1")
    start_commands(args.recipe)  # an unknown recipe, or one without a start, fails before anything else
    if args.against is not None and not (args.against / "reproduce.json").is_file():
        fail(f"--against {args.against}: no reproduce.json there (a reproduction writes it when it has finished)")
    args.tasks = args.tasks or default_tasks(args.recipe)
    args.out = (args.out or Path("outputs/reproduce") / args.recipe / time.strftime("%Y-%m-%d_%H-%M-%S")).resolve()
    return args


def main() -> None:
    args = parse()
    if args.dry_run:
        for seed in args.starts:
            print(f"# start {seed} (folders under {args.out / f'start_{seed}'})")
            for phase, words in plan(args, seed).items():
                if phase == "build":
                    print(f"# build: the tiny model that `agentrl train {shlex.join(words)}` builds (cached)")
                else:
                    print(f"agentrl {shlex.join(words)}")
        return
    if args.threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # this process's build, and every phase's
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    machine = machine_line()
    print(f"reproducing {args.recipe} over starts {args.starts} into {args.out}; {machine}", flush=True)
    try:
        seconds = {seed: run_start(args, seed, child_env) for seed in args.starts}
    except KeyboardInterrupt:
        again = shlex.join([*sys.argv[1:], *([] if "--out" in sys.argv else ["--out", str(args.out)])])
        fail(f"stopped; the phases that finished are kept: `python {sys.argv[0]} {again}` goes on where it was")
    figures = [start_figures(args.out / f"start_{seed}", seconds[seed]) for seed in args.starts]
    gains, mean = gains_over_starts(figures)
    command = "python scripts/reproduce_recipe.py " + shlex.join(sys.argv[1:])
    seeded = "the build and RL" if start_commands(args.recipe)[0] is None else "the build, the clone and RL"
    lines = [
        f"{args.recipe} over {len(args.starts)} independent starts (seed=S seeds {seeded}), "
        f"held-out success on {args.tasks} tasks",
        f"{command}",
        machine,
        "",
        *table(args.starts, figures, gains, mean),
        "",
        "Intervals: a paired bootstrap over the held-out tasks (each task's end minus its start); the mean's resamples "
        "the starts, then the tasks within each (10,000 resamples). Wall times: RL's `agentrl train` as a whole; all "
        "in: every phase of the start (build or clone, train, both evaluations).",
    ]
    ended = mean_end(figures)
    if len(figures) > 1:
        lines[-2:-2] = ["", f"The mean end: {ended[0]:.3f} [{ended[1]:.3f}, {ended[2]:.3f}] (the ends resampled alike)"]
    if args.against is not None:
        lines += ["", *against_lines(args.starts, figures, args.against.resolve())]
    print("\n".join(lines))
    summary = {
        "recipe": args.recipe,
        "command": command,
        "machine": machine,
        "tasks": args.tasks,
        "starts": {seed: {**f, "gain": g} for seed, f, g in zip(args.starts, figures, gains)},
        "mean_gain": mean,
        "mean_end": ended,
        "phases_s": seconds,
        "row": lines,
    }
    (args.out / "reproduce.json").write_text(json.dumps(summary, indent=2))
    print(f"written: {args.out / 'reproduce.json'}")


if __name__ == "__main__":
    main()
