"""Write a Qwen2.5-0.5B/1.5B/7B-Instruct-shaped model folder with random weights, offline.

The folder holds what a download of Qwen/Qwen2.5-<size>-Instruct holds (config.json, generation_config.json,
model.safetensors, tokenizer.json, vocab.json, merges.txt, tokenizer_config.json with the chat template),
built from the published architecture numbers, with random weights and a locally made BPE vocabulary of
the real size (151,643 regular tokens and 22 added ones; agentrl/models/qwen_tokenizer.py says how). Then:

    agentrl train model=qwen2.5-1.5b-instruct model.path=<folder> hardware=gpu ...

runs through the same code as a downloaded model. Good for memory and time, not for learning.

    python scripts/build_qwen_shaped.py --size 1.5b --out /tmp/qwen1.5b                  # CPU, bf16: ~3 GB
    python scripts/build_qwen_shaped.py --size 7b --out /tmp/qwen7b --device cuda        # ~15 GB on disk
    python scripts/build_qwen_shaped.py --size test --regular-tokens 2048 --out /tmp/t   # tiny, for tests
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl.models.qwen_shapes import SIZES, build_folder  # noqa: E402
from agentrl.models.qwen_tokenizer import QWEN25_REGULAR_TOKENS  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=list(SIZES), required=True, help="test: 2 layers, hidden 64 (not published)")
    p.add_argument("--out", type=Path, required=True, help="the folder to write (must not exist, or be empty)")
    p.add_argument(
        "--regular-tokens",
        type=int,
        default=QWEN25_REGULAR_TOKENS,
        help=f"BPE tokens before the 22 added ones (default {QWEN25_REGULAR_TOKENS:,}, Qwen2.5's; "
        "fewer gives a smaller embedding, for tests)",
    )
    p.add_argument("--dtype", choices=["bf16", "fp32", "fp16"], default="bf16", help="weights as saved (default bf16)")
    p.add_argument("--device", default="cpu", help="where the random weights are made (cuda is faster for 7b)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        raise SystemExit(f"error: {args.out} exists and is not empty")
    started = time.time()
    report = build_folder(
        args.size, args.out, regular_tokens=args.regular_tokens, dtype=args.dtype, device=args.device, seed=args.seed
    )
    report["build_s"] = round(time.time() - started, 1)
    print(json.dumps(report))
    print(f"wrote {args.out}; use it with model.path={args.out}")


if __name__ == "__main__":
    main()
