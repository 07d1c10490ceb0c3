"""The memory plan's estimate against the measured peak RSS of short `agentrl train` runs on this CPU.

Each setting runs `agentrl train` in a child process that measures it (resource.getrusage(RUSAGE_CHILDREN)
.ru_maxrss: the largest resident set of the training process), after printing the plan's estimate for the
same overrides. The estimate sizes every row at max_prompt_tokens + max_new_tokens; the Qwen-shaped settings
cut prompts to 128 tokens (household's prompts are longer, so every row reaches it) and the random weights
always reply max_new_tokens tokens, so the measured run meets the bound the plan assumes.

    python scripts/bench_memory.py                                 # the tiny default
    python scripts/bench_memory.py --model-path /tmp/qwen05 --only 0.5b-mb8 0.5b-mb8-checkpointing
    python scripts/bench_memory.py --only 135m-mb16                # the real SmolLM2-135M (fetched first)
    python scripts/bench_memory.py --recipes                       # the real-model recipes on 80 GB H100s, no run
    (the folder: python scripts/build_qwen_shaped.py --size 0.5b --out /tmp/qwen05)

Each run takes minutes on 2 cores (0.5B: ~5-15); run one at a time on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHORT = ["trainer.iterations=1", "logger.wandb_mode=disabled", "logger.progress=false"]
# 4 episodes of 2 turns: 8 step rows of 128 + 8 tokens, one micro-batch; one optimizer step (no old log-prob pass);
# KL on (the reference copy is one of the terms). Small, because 2 shared cores train a 0.5B model slowly.
QWEN_SHORT = [
    "env=household",
    "env.max_steps=2",
    "trainer.tasks_per_iteration=2",
    "trainer.group_size=2",
    "trainer.mini_batch_size=null",
    "trainer.micro_batch_tokens=null",  # rows only: the model's own default budget would cap the micro-batch
    "rollout.max_prompt_tokens=128",
    "rollout.max_new_tokens=8",
    "eval.num_tasks=1",
    "trainer.eval_every=0",  # the evaluation at the end only (generation of 1 episode: not the peak)
    "algo.kl_coef=0.01",
]


# The real SmolLM2-135M-Instruct (agentrl models fetch smollm2-135m-instruct): household's own prompts (up to ~300
# tokens), 16 episodes of 2 turns in micro-batches of 16 rows without checkpointing, so that activations weigh in.
# A pretrained model may stop before max_new_tokens, so rows can stay below the plan's bound.
SMOLLM2_SHORT = [
    "model=smollm2-135m-instruct",
    *SHORT,
    "env=household",
    "env.max_steps=2",
    "trainer.tasks_per_iteration=4",
    "trainer.group_size=4",
    "trainer.micro_batch_tokens=null",
    "trainer.micro_batch_size=16",
    "trainer.gradient_checkpointing=false",
    "rollout.max_new_tokens=16",
    "eval.num_tasks=1",
    "trainer.eval_every=0",
    "algo.kl_coef=0.01",
]


def settings(model_path: str | None) -> dict[str, list[str]]:
    out = {
        "tiny-default": list(SHORT),
        "135m-mb16": list(SMOLLM2_SHORT),
        "135m-mb16-checkpointing": [*SMOLLM2_SHORT, "trainer.gradient_checkpointing=true"],
    }
    if model_path:
        qwen = ["model=qwen2.5-0.5b-instruct", f"model.path={model_path}", *SHORT, *QWEN_SHORT]
        out["0.5b-mb8"] = [*qwen, "trainer.micro_batch_size=8", "trainer.gradient_checkpointing=false"]
        out["0.5b-mb8-checkpointing"] = [*qwen, "trainer.micro_batch_size=8", "trainer.gradient_checkpointing=true"]
        out["0.5b-mb4"] = [*qwen, "trainer.micro_batch_size=4", "trainer.gradient_checkpointing=false"]
    return out


def estimate_gib(overrides: list[str]) -> tuple[float, str]:
    from agentrl.cli.launch import preflight
    from agentrl.memory.check import plan_of, plan_text
    from agentrl.memory.plan import GIB

    cfg = preflight("train", overrides)
    found = plan_of(cfg)
    return (found[0].peak / GIB if found else float("nan")), plan_text(cfg)


def measure(overrides: list[str]) -> None:
    """Run the training in a child; print its peak RSS in GiB (this process only waits for it)."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "agentrl.cli", "train", *overrides, f"hydra.run.dir={folder}/run"]
        env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
        started = time.time()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"FAILED ({done.returncode}): {done.stderr.strip()[-400:]}", file=sys.stderr)
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: KiB
        print(f"MEASURED {peak_kib / 1024**2:.2f} {time.time() - started:.0f} {done.returncode}")


H100_BYTES = 81559 * 1024**2  # an 80 GB H100 as nvidia-smi reports it
RECIPE_RUNS = {
    "grpo_alfworld_1.5b": [["hardware=gpu"]],
    "gigpo_alfworld_1.5b": [["hardware=gpu"]],
    "grpo_alfworld_7b": [
        ["hardware=gpu"],
        ["hardware=multi_gpu", "hardware.num_processes=4", "hardware.strategy=fsdp"],
    ],
    "gigpo_alfworld_7b": [
        ["hardware=gpu"],
        ["hardware=multi_gpu", "hardware.num_processes=4", "hardware.strategy=fsdp"],
    ],
    "gigpo_alfworld_7b_lora": [["hardware=gpu"], ["hardware=multi_gpu", "hardware.num_processes=2"]],
}


def recipe_estimates() -> None:
    """Each real-model recipe's plan on 80 GB H100s (no GPU needed: the plan reads the Qwen2.5 shapes)."""
    from agentrl.cli.launch import preflight
    from agentrl.memory import check as memory_check
    from agentrl.memory import plan as mp

    print("recipe | hardware | peak GiB per GPU (of 79.6) | larger phase | the largest terms")
    for name, runs in RECIPE_RUNS.items():
        for hardware in runs:
            cfg = preflight("train", [f"+experiment={name}", *hardware])
            estimate = mp.plan(memory_check.model_shape(cfg.model), memory_check.workload(cfg, H100_BYTES))
            top = sorted(estimate.terms.items(), key=lambda kv: -kv[1])[:4]
            terms = ", ".join(f"{k} {v / mp.GIB:.1f}" for k, v in top)
            print(f"{name} | {' '.join(hardware)} | {estimate.peak / mp.GIB:.1f} | {estimate.larger_phase} | {terms}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", help="a Qwen2.5-0.5B-shaped folder (scripts/build_qwen_shaped.py --size 0.5b)")
    p.add_argument("--only", nargs="*", help="setting names to run (default: all)")
    p.add_argument("--recipes", action="store_true", help="print the real-model recipes' estimates on H100s, no run")
    p.add_argument("--measure", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)  # the measuring child
    args = p.parse_args()
    if args.recipes:
        return recipe_estimates()
    if args.measure is not None:
        return measure(args.measure)
    rows = []
    for name, overrides in settings(args.model_path).items():
        if args.only and name not in args.only:
            continue
        estimate, text = estimate_gib(overrides)
        print(f"== {name}: agentrl train {' '.join(overrides)}\n{text}", flush=True)
        # a fresh child per setting: RUSAGE_CHILDREN keeps the largest child it has ever waited for
        child = subprocess.run(
            [sys.executable, __file__, "--measure", *overrides], capture_output=True, text=True, cwd=REPO
        )
        line = next((s for s in child.stdout.splitlines() if s.startswith("MEASURED")), None)
        measured, seconds, rc = line.split()[1:] if line else ("nan", "?", "?")
        print(child.stderr.strip()[-400:], file=sys.stderr) if child.stderr.strip() else None
        rows.append((name, estimate, float(measured), seconds, rc))
        print(
            f"{name}: estimate {estimate:.2f} GiB, measured peak RSS {float(measured):.2f} GiB ({seconds} s, rc {rc})"
        )
    print("\nsetting | estimate GiB | measured peak RSS GiB | estimate / measured")
    for name, estimate, measured, _, _ in rows:
        print(f"{name} | {estimate:.2f} | {measured:.2f} | {estimate / measured:.2f}")


if __name__ == "__main__":
    main()
