"""Memory and time of one training iteration with a Qwen2.5-0.5B/1.5B/7B-shaped model, through the real CLI.

Nothing is downloaded. The script
1. writes a Qwen2.5-<size>-Instruct-shaped folder with random weights and a tokenizer of Qwen2.5's size
   (151,665 tokens, the 151,936-row embedding, the Qwen2.5 chat template; agentrl/models/qwen_shapes.py), or
   reuses one given with --model-dir;
2. runs ONE training iteration through `agentrl train` (the Typer app, Hydra, agentrl.train.run) in this
   process: `hardware=gpu model=qwen2.5-<size>-instruct model.path=<folder> env=household
   env.prompt_template=alfworld env.history_length=8 ...`, HF `generate` rollouts, KL reference on
   (algo.kl_coef=0.01: a frozen copy, or with --lora the base model with the adapter disabled),
   verl-agent's mini-batches of 256 rows (so the old log-probs are taken too);
3. times each part by wrapping a few methods in this process (no file changes): `generate`, the
   environments' reset/step, the old and reference log-probs, forward/backward, the optimizer step; and
   reads the peak GPU memory of each phase (torch.cuda.max_memory_allocated). It prints a table and one
   JSON line.

    python scripts/bench_gpu_iteration.py --size 1.5b                    # on a GPU machine
    python scripts/bench_gpu_iteration.py --size 7b --lora
    python scripts/bench_gpu_iteration.py --size 1.5b --model-dir /tmp/q15 --keep   # build once, reuse
    python scripts/bench_gpu_iteration.py --device cpu --size test --regular-tokens 2048   # check it on a CPU

Prompts. ALFWorld's prompts are about 1,300 tokens; the household environment's are shorter, so the
default is its `default` level (10 steps) with the last 8 observation/action pairs in the prompt
(`env.history_length=8`). With random weights every reply is 64 tokens of noise, which the history
quotes (cut to 200 characters), so the mean prompt comes out near ALFWorld's; the JSON line gives the
measured mean and the longest row.

What the numbers are. Random weights almost never sample the end token, so every reply runs to
--max-new-tokens and every episode to the step limit: a worst case for generation length. "rollout"
is the whole collection plus the advantages and the log-probs; "generate" is the time inside
`generate`, "environment" inside the environments' reset and step, "old/ref log-probs" the forward
passes before the first step; "forward/backward" and "optimizer" add up the update's mini-batches.
The checkpoint the iteration would write is skipped (I/O, not the iteration; --save-checkpoint keeps
it); the final held-out evaluation runs on one task and is not in the timings.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GIB = 1024**3
MODEL_OPTION = {"0.5b": "qwen2.5-0.5b-instruct", "1.5b": "qwen2.5-1.5b-instruct", "7b": "qwen2.5-7b-instruct"}
MICRO_BATCH = {"test": 16, "0.5b": 8, "1.5b": 4, "7b": 2}
# --device cpu: the CPU shape (2 tasks x 2 episodes, 2 pairs of history, 3 turns), small enough for 2 cores
CPU_DEFAULTS = dict(tasks=2, group_size=2, history=2, max_steps=3, micro_batch_size=2)
GPU_DEFAULTS = dict(tasks=8, group_size=8, history=8, max_steps=None)
PARTS = ("generate", "environment", "old_logps", "ref_logps", "forward_backward", "optimizer")


def parse_args() -> argparse.Namespace:
    from agentrl.models.qwen_shapes import SIZES
    from agentrl.models.qwen_tokenizer import QWEN25_REGULAR_TOKENS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--size", choices=list(SIZES), default="1.5b", help="test: 2 layers, hidden 64 (not published)")
    p.add_argument(
        "--regular-tokens",
        type=int,
        default=QWEN25_REGULAR_TOKENS,
        help=f"BPE tokens of the vocabulary (default {QWEN25_REGULAR_TOKENS:,}, Qwen2.5's: 151,936 embedding rows)",
    )
    p.add_argument("--lora", action="store_true", help="train a LoRA adapter (verl-agent's 7B: rank 64, alpha 64)")
    p.add_argument("--kl-coef", type=float, default=0.01, help="algo.kl_coef (0 drops the reference)")
    p.add_argument("--tasks", type=int, help="trainer.tasks_per_iteration (default: 8 on cuda, 2 on cpu)")
    p.add_argument("--group-size", type=int, help="trainer.group_size (default: 8 on cuda, 2 on cpu)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="rollout.max_new_tokens")
    p.add_argument(
        "--history", type=int, help="env.history_length (default: 8 on cuda, ALFWorld-length prompts; 2 on cpu)"
    )
    p.add_argument(
        "--max-steps", type=int, help="env.max_steps, turns per episode (default: the level's 10 on cuda; 3 on cpu)"
    )
    p.add_argument("--level", default="default", help="env.level of the household environment")
    p.add_argument(
        "--micro-batch-size",
        type=int,
        help="trainer.micro_batch_size, rows per pass (default: 16 test, 8 0.5b, 4 1.5b, 2 7b: without gradient "
        "checkpointing a 1.5B row of 2,000 tokens keeps about 6 GB of activations, a 7B row about 13 GB; "
        "0: no override, the model option's own memory settings)",
    )
    p.add_argument(
        "--mini-batch-size", type=int, default=256, help="trainer.mini_batch_size (verl-agent's 256; 0: one step)"
    )
    p.add_argument("--override", nargs="*", default=[], help="extra Hydra overrides")
    p.add_argument("--model-dir", type=Path, help="a model folder to use, or where to build it (kept)")
    p.add_argument("--workdir", type=Path, help="where the run goes (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the work folder (model + run) afterwards")
    p.add_argument("--save-checkpoint", action="store_true", help="let the iteration write its checkpoint")
    p.add_argument("--json-out", type=Path, help="also write the result to this file")
    args = p.parse_args()
    defaults = CPU_DEFAULTS if args.device == "cpu" else {**GPU_DEFAULTS, "micro_batch_size": MICRO_BATCH[args.size]}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def instrument(device: str, stats: dict) -> None:
    """Wrap methods of this process (no file is changed) to time each part of the training iteration and
    read the peak GPU memory of each phase; the final held-out evaluation is left out."""
    import torch
    from accelerate.optimizer import AcceleratedOptimizer
    from transformers.generation.utils import GenerationMixin

    from agentrl.envs import workers
    from agentrl.train import update
    from agentrl.train.trainer import AgentTrainer

    stats.update({f"{part}_s": 0.0 for part in PARTS}, generate_calls=0, in_rollout=False, in_update=False)
    cuda = device == "cuda"

    def timed(owner, name: str, part: str, when: str | None = "in_rollout"):
        original = getattr(owner, name)

        def wrapper(*a, **k):
            if when is not None and not stats[when]:
                return original(*a, **k)
            sync(device)
            started = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                sync(device)
                stats[f"{part}_s"] += time.perf_counter() - started

        setattr(owner, name, wrapper)

    timed(GenerationMixin, "generate", "generate")
    timed(workers._SlotPool, "reset", "environment")
    timed(workers._SlotPool, "step", "environment")
    timed(AgentTrainer, "_old_logps", "old_logps", None)
    timed(AgentTrainer, "_reference_logps", "ref_logps", None)
    timed(update, "accumulate_gradient", "forward_backward", None)  # update_policy looks them up in its module
    timed(update, "clipped_grad_norm", "optimizer", None)
    timed(AcceleratedOptimizer, "step", "optimizer", None)

    generate = GenerationMixin.generate

    def counted_generate(self, *a, **k):
        if stats["in_rollout"]:
            stats["generate_calls"] += 1
        return generate(self, *a, **k)

    GenerationMixin.generate = counted_generate

    rollout, add_logps = AgentTrainer._rollout, AgentTrainer._add_policy_logps
    training_step = AgentTrainer.training_step

    def peak(key: str) -> None:
        if cuda:
            stats[key] = max(stats.get(key, 0), torch.cuda.max_memory_allocated())
            reserved = f"{key}_reserved"  # the allocator's cache: what nvidia-smi would show
            stats[reserved] = max(stats.get(reserved, 0), torch.cuda.max_memory_reserved())
            torch.cuda.reset_peak_memory_stats()  # resets both peaks

    def flagged_rollout(self, *a, **k):
        peak("peak_before_rollout")
        stats["in_rollout"] = True
        try:
            return rollout(self, *a, **k)
        finally:
            stats["in_rollout"] = False
            peak("peak_generation")

    def measured_logps(self, batch):
        prompt, completion = batch["prompt_mask"].sum(1), batch["completion_mask"].sum(1)
        stats.update(
            rows=int(prompt.numel()),
            mean_prompt_tokens=float(prompt.float().mean()),
            max_row_tokens=int((prompt + completion).max()),
            padded_width=int(batch["prompt_ids"].size(1) + batch["completion_ids"].size(1)),
            ref_model="copy" if self.ref_model is not None else ("base (adapter off)" if self.beta else "none"),
        )
        peak("peak_scoring")
        out = add_logps(self, batch)
        peak("peak_logps")
        return out

    def measured_step(self, *a, **k):
        out = training_step(self, *a, **k)
        peak("peak_update")
        stats["optimizer_steps"] = self.iteration_metrics.get("train/optimizer_steps")
        return out

    AgentTrainer._rollout = flagged_rollout
    AgentTrainer._add_policy_logps = measured_logps
    AgentTrainer.training_step = measured_step
    if stats["save_checkpoint"]:
        stats["checkpoint_s"] = 0.0
        timed(AgentTrainer, "_save_checkpoint", "checkpoint", None)
    else:
        AgentTrainer._save_checkpoint = lambda self, model, trial: None


def overrides(args, model_dir: Path, run_dir: Path) -> list[str]:
    model = MODEL_OPTION.get(args.size, "qwen2.5-0.5b-instruct")  # test: any Qwen option, the path wins
    out = [
        f"hardware={'gpu' if args.device == 'cuda' else 'cpu'}",
        f"model={model}",
        f"model.path='{model_dir}'",
        "env=household",
        f"env.level={args.level}",
        "env.prompt_template=alfworld",
        f"env.history_length={args.history}",
        f"env.max_steps={args.max_steps if args.max_steps is not None else 'null'}",
        f"algo.kl_coef={args.kl_coef}",
        "trainer.iterations=1",
        "trainer.eval_every=0",
        f"trainer.tasks_per_iteration={args.tasks}",
        f"trainer.group_size={args.group_size}",
        f"trainer.mini_batch_size={args.mini_batch_size or 'null'}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        "eval.num_tasks=1",
        "logger=none",
        "logger.progress=false",
        f"hydra.run.dir='{run_dir}'",
    ]
    if args.micro_batch_size:
        out.append(f"trainer.micro_batch_size={args.micro_batch_size}")
    if args.lora:
        out += ["model.lora.enabled=true", "model.lora.rank=64", "model.lora.alpha=64", "model.lora.dropout=0.0"]
    return out + list(args.override)


def memory_plan_of(argv: list[str]) -> dict[str, float]:
    """The memory plan's estimate for the same overrides, in GiB: the peak, each phase, each term."""
    from agentrl.cli.launch import preflight
    from agentrl.memory.check import plan_of

    found = plan_of(preflight("train", argv))
    if found is None:
        return {}
    estimate = found[0]
    staying = estimate.peak - max(estimate.update_bytes, estimate.generation_bytes)
    out = {
        "estimate_peak": estimate.peak,
        "estimate_update_phase": staying + estimate.update_bytes,
        "estimate_generation_phase": staying + estimate.generation_bytes,
        **{f"term_{name}": size for name, size in estimate.terms.items()},
    }
    return {k: round(v / GIB, 2) for k, v in out.items()}


def train_once(args, model_dir: Path, run_dir: Path, stats: dict) -> float:
    """One iteration through `agentrl train` (the Typer app, Hydra and agentrl.train.run), in this process."""
    import torch

    from agentrl.cli import app

    argv = overrides(args, model_dir, run_dir)
    stats["command"] = "agentrl train " + " ".join(argv)
    stats["plan"] = memory_plan_of(argv)
    instrument(args.device, stats)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.time()
    try:
        app(["train", *argv], standalone_mode=False)
    except BaseException:  # Hydra reports the error and exits; say how far memory had got (an OOM, most often)
        if args.device == "cuda":
            seen = {k: round(v / GIB, 2) for k, v in stats.items() if k.startswith("peak_")}
            print(f"training failed; peak GPU memory so far (GiB): {seen}", file=sys.stderr)
        raise
    return time.time() - started


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    import torch
    import transformers
    import trl

    from agentrl import metrics_log
    from agentrl.models.qwen_shapes import build_folder

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but no CUDA device is visible; use --device cpu --size test")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentrl-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model_dir, run_dir = args.model_dir or workdir / "model", workdir / "run"
    stats: dict = {"save_checkpoint": args.save_checkpoint}
    info: dict = {}
    try:
        if (model_dir / "config.json").is_file():
            info = (
                json.loads((model_dir / "qwen_shape.json").read_text())
                if (model_dir / "qwen_shape.json").is_file()
                else {}
            )
            build_s = 0.0
        else:
            started = time.time()
            info = build_folder(
                args.size,
                model_dir,
                regular_tokens=args.regular_tokens,
                dtype="bf16" if args.device == "cuda" else "fp32",
                device=args.device,
            )
            build_s = time.time() - started
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()
        wall_s = train_once(args, model_dir, run_dir, stats)
        rec = next(r for r in metrics_log.read_records(run_dir) if "time/rollout_s" in r)
    finally:
        if args.keep:
            print(f"kept the run in {workdir} and the model in {model_dir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    tokens, rollout_s, update_s = rec["rollout/completion_tokens"], rec["time/rollout_s"], rec["time/update_s"]
    parts = {f"{part}_s": round(stats[f"{part}_s"], 3) for part in PARTS}
    other_rollout = rollout_s - sum(stats[f"{p}_s"] for p in ("generate", "environment", "old_logps", "ref_logps"))
    other_update = update_s - stats["forward_backward_s"] - stats["optimizer_s"]
    result = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "size": args.size,
        "lora": args.lora,
        **info,
        "tasks": args.tasks,
        "group_size": args.group_size,
        "episodes": args.tasks * args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "history_length": args.history,
        "max_steps": args.max_steps,
        "micro_batch_size": args.micro_batch_size,
        "mini_batch_size": args.mini_batch_size or None,
        "optimizer_steps": stats.get("optimizer_steps"),
        "rows": stats.get("rows"),
        "mean_prompt_tokens": round(stats.get("mean_prompt_tokens", float("nan")), 1),
        "max_row_tokens": stats.get("max_row_tokens"),
        "padded_width": stats.get("padded_width"),
        "completion_tokens": int(tokens),
        "invalid_rate": rec.get("rollout/invalid_rate"),
        "rollout_s": round(rollout_s, 2),
        "update_s": round(update_s, 2),
        "iteration_s": round(rollout_s + update_s, 2),
        **parts,
        "other_rollout_s": round(other_rollout, 2),
        "other_update_s": round(other_update, 2),
        "generate_calls": stats["generate_calls"],
        "tokens_per_s": round(tokens / (rollout_s + update_s), 1),
        "generate_tokens_per_s": round(tokens / stats["generate_s"], 1) if stats["generate_s"] else None,
        "ref_model": stats.get("ref_model"),
        "checkpoint": args.save_checkpoint,
        "checkpoint_s": round(stats["checkpoint_s"], 1) if args.save_checkpoint else None,
        "build_s": round(build_s, 1),
        "train_wall_s": round(wall_s, 1),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
    }
    if args.device == "cuda":
        phases = ("peak_generation", "peak_logps", "peak_update")
        result.update({f"{k}_gib": round(stats.get(k, 0) / GIB, 2) for k in phases})
        result["peak_gib"] = max(result[f"{k}_gib"] for k in phases)
        result["peak_reserved_gib"] = round(max(stats.get(f"{k}_reserved", 0) for k in phases) / GIB, 2)
        result["gpu_total_gib"] = round(torch.cuda.get_device_properties(0).total_memory / GIB, 1)
    result["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 2)
    result["memory_plan_gib"] = stats.get("plan", {})
    print_table(result, stats["command"])
    line = json.dumps(result)
    if args.json_out:
        args.json_out.write_text(line + "\n")
    print(line)


def print_table(r: dict, command: str) -> None:
    from rich.console import Console
    from rich.table import Table

    what = f"Qwen2.5-{r['size'].upper()}-shaped" if r["size"] != "test" else "test-size Qwen2"
    lora = " + LoRA" if r["lora"] else ""
    table = Table(title=f"one training iteration: {what}{lora}, {r.get('dtype', '?')}, {r['device_name']}")
    table.add_column("what")
    table.add_column("value", justify="right")
    vocab = f"{r.get('model_vocab', 0):,} rows, tokenizer {r.get('tokenizer_vocab', 0):,}"
    rows = [
        ("parameters / vocabulary", f"{r.get('parameters', 0) / 1e6:,.1f} M / {vocab}"),
        ("reference model (KL)", str(r["ref_model"])),
        ("episodes (tasks x group)", f"{r['episodes']} ({r['tasks']} x {r['group_size']})"),
        ("rows / micro-batch / optimizer steps", f"{r['rows']} / {r['micro_batch_size']} / {r['optimizer_steps']}"),
        ("mean prompt tokens / longest row", f"{r['mean_prompt_tokens']} / {r['max_row_tokens']}"),
        ("generated tokens", f"{r['completion_tokens']:,}"),
        ("iteration s (rollout + update)", f"{r['iteration_s']:.1f} ({r['rollout_s']:.1f} + {r['update_s']:.1f})"),
        ("  generate s", f"{r['generate_s']:.1f} ({r['generate_calls']} calls)"),
        ("  environment s", f"{r['environment_s']:.2f}"),
        ("  old / ref log-probs s", f"{r['old_logps_s']:.1f} / {r['ref_logps_s']:.1f}"),
        ("  other rollout s (prompts, tokenizing, advantages)", f"{r['other_rollout_s']:.1f}"),
        ("  forward/backward s", f"{r['forward_backward_s']:.1f}"),
        ("  optimizer s", f"{r['optimizer_s']:.2f}"),
        ("  other update s", f"{r['other_update_s']:.2f}"),
        ("generated tok/s (per iteration s)", f"{r['tokens_per_s']:,.1f}"),
        ("generated tok/s (inside generate)", f"{r['generate_tokens_per_s'] or float('nan'):,.1f}"),
    ]
    if r["device"] == "cuda":
        rows += [
            ("peak GPU memory allocated", f"{r['peak_gib']:.2f} GiB of {r['gpu_total_gib']} GiB"),
            ("  generation (models, generate)", f"{r['peak_generation_gib']:.2f} GiB"),
            ("  old/ref log-probs", f"{r['peak_logps_gib']:.2f} GiB"),
            ("  update (+ grads, AdamW)", f"{r['peak_update_gib']:.2f} GiB"),
            ("memory plan's estimate: peak", f"{r['memory_plan_gib'].get('estimate_peak', float('nan')):.2f} GiB"),
            (
                "  generation phase / update phase",
                f"{r['memory_plan_gib'].get('estimate_generation_phase', float('nan')):.2f} / "
                f"{r['memory_plan_gib'].get('estimate_update_phase', float('nan')):.2f} GiB",
            ),
            ("peak GPU memory reserved", f"{r['peak_reserved_gib']:.2f} GiB"),
        ]
    rows.append(("peak resident memory (process)", f"{r['peak_rss_gib']:.2f} GiB"))
    if r["device"] == "cpu":
        rows.append(
            ("memory plan's estimate: peak", f"{r['memory_plan_gib'].get('estimate_peak', float('nan')):.2f} GiB")
        )
    for row in rows:
        table.add_row(*row)
    console = Console(width=max(Console().width, 110))
    console.print(table)
    if r["checkpoint"]:
        console.print(f"checkpoint written in {r['checkpoint_s']:.1f} s (not in the iteration's time)")
    else:
        console.print("checkpoint: not written (--save-checkpoint writes it); the final evaluation is untimed")
    console.print(f"ran: {command}", soft_wrap=True)


if __name__ == "__main__":
    main()
