"""The log-prob pass's LM head on a CPU: every position projected (TRL's choice without Triton) against the
completions' positions only (agentrl/fused_head.py), on SmolLM2-135M-Instruct.

    python scripts/bench_logprob_head.py                       # 4 rows of 332 + 10 tokens, fp32 and bf16 autocast
    python scripts/bench_logprob_head.py --rows 16 --repeats 3
    python scripts/bench_logprob_head.py --rows 16 --prompt 165 --profile   # + where the update's time goes

For each precision it times one forward and backward of the model through TRL's fused head (the loss: the sum of
the completion's log-probs), the best of `--repeats` after one warm-up, first with every position projected, then
with the completions' only, and prints the speed-up and how far the log-probs and the embedding's gradient (the
head's weight, tied) moved. The model comes from the registry (`agentrl models fetch smollm2-135m-instruct`).

`--profile` then runs the training path (bf16 autocast, the completions' positions only) once more under torch's
profiler and splits its time by operator: the matrix products (their FLOPs as the profiler counts them, so their
own GFLOP/s) against attention, the dtype casts and the rest, with the largest of those; then the step's share of
the bf16 matmul peak, measured in the same run as scripts/bench_cpu_speed.py measures it.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=332, help="prompt tokens per row (a household turn: ~330)")
    parser.add_argument("--completion", type=int, default=10, help="completion tokens per row")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="split the bf16 training path's time by operator")
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from agentrl.fused_head import score_completion_only
    from agentrl.registry_models import ensure_registry_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(ensure_registry_model("smollm2-135m-instruct")))
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = torch.randint(0, model.config.vocab_size, (args.rows, args.prompt + args.completion))
    attention = torch.ones_like(ids)
    labels = ids.clone()
    labels[:, : args.prompt] = -100

    def step(bf16: bool):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
        logps = out.log_probs[:, args.prompt - 1 :]
        logps.sum().backward()
        return logps.detach().clone(), model.get_input_embeddings().weight.grad.clone()

    results = {}
    for mode in ("every position", "completions only"):
        if mode == "completions only":
            score_completion_only()
        for bf16 in (False, True):
            step(bf16)
            times = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                logps, grad = step(bf16)
                times.append(time.perf_counter() - started)
            results[mode, bf16] = (min(times), logps, grad)
            print(f"{mode:17s} {'bf16' if bf16 else 'fp32'}: {min(times):.3f} s", flush=True)
    for bf16 in (False, True):
        (before, logps_a, grad_a), (after, logps_b, grad_b) = (
            results["every position", bf16],
            results["completions only", bf16],
        )
        print(
            f"{'bf16' if bf16 else 'fp32'}: {before / after:.2f}x; largest log-prob change "
            f"{(logps_a - logps_b).abs().max().item():.2e}; largest gradient change "
            f"{((grad_a - grad_b).abs().max() / grad_a.abs().max()).item():.2e} of the largest entry"
        )
    if args.profile:
        from bench_cpu_speed import ceiling, model_shape  # this folder's benchmark: the same ceiling

        peak = ceiling(model_shape(model.config))["bf16_peak_gflops"]
        profile(lambda: step(True), results["completions only", True][0], peak)


MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")
GROUPS = {  # operator name -> the group it is reported in
    "attention": ("scaled_dot_product", "flash_attention", "attention"),
    "dtype casts": ("aten::to", "aten::_to_copy", "aten::copy_"),
    "log-softmax": ("log_softmax", "logsumexp"),
}


def profile(step, unprofiled_s: float, peak_gflops: float) -> None:
    """One step under torch's profiler; self CPU time by group, the matrix products' own GFLOP/s, the largest
    operators outside them, and the share of the bf16 peak the step reaches: its matrix products' FLOPs over its
    unprofiled time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        started = time.perf_counter()
        step()
        wall = time.perf_counter() - started
    seconds: dict[str, float] = {}
    others: dict[str, float] = {}
    matmul_flops = 0.0
    for event in prof.key_averages():
        name, self_s = event.key, event.self_cpu_time_total / 1e6
        if any(name.startswith(m) for m in MATMULS):
            group = "matrix products"
            matmul_flops += event.flops or 0
        else:
            group = next((g for g, parts in GROUPS.items() if any(p in name for p in parts)), "the rest")
            others[name] = others.get(name, 0.0) + self_s
        seconds[group] = seconds.get(group, 0.0) + self_s
    total = sum(seconds.values())
    print(f"profiled step: {wall:.2f} s wall, {total:.2f} s of operators' self time")
    for group, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
        extra = f", {matmul_flops / s / 1e9:.0f} GFLOP/s" if group == "matrix products" and s else ""
        print(f"  {group:16s} {s:7.2f} s  {100 * s / total:5.1f} %{extra}")
    print("largest operators outside the matrix products:")
    for name, s in sorted(others.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {name:40s} {s:6.2f} s  {100 * s / total:5.1f} %")
    # The profiler's own cost falls mostly on the many small operators, so the shares above overstate them; the
    # step's share of the peak is therefore taken from its unprofiled time.
    print(
        f"the step's matrix products: {matmul_flops / 1e12:.2f} TFLOP; bf16 peak measured now {peak_gflops:.0f} GFLOP/s; "
        f"unprofiled step {unprofiled_s:.2f} s: {matmul_flops / unprofiled_s / 1e9:.0f} GFLOP/s, "
        f"{100 * matmul_flops / unprofiled_s / 1e9 / peak_gflops:.0f} % of the peak"
    )


if __name__ == "__main__":
    main()
