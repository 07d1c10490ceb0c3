"""How often a two-rank gloo job aborts as its ranks exit, for each way of ending a rank.

    python scripts/check_rank_exit.py --runs 40 --ending finalize
    python scripts/check_rank_exit.py --runs 40 --ending leave

Each run starts two CPU ranks with torchrun; each rank wraps a linear layer in DDP through accelerate, takes three
optimizer steps and one gather, then ends:
- `finalize`: returns, and the interpreter's finalization tears the process group down;
- `destroy`: `accelerator.end_training()` (destroy_process_group), then returns;
- `exit`: `os._exit(0)`, without destroy_process_group;
- `leave`: `agentrl.train.distributed.leave`, what an agentrl rank does (end_training, flush, `os._exit(0)`).
A run counts as aborted when torchrun fails or a rank prints "terminate called" (docs/architecture.md, "How a rank
ends").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

ENDINGS = ("finalize", "destroy", "exit", "leave")


def rank(ending: str) -> None:
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(3):
        accelerator.backward(model(torch.randn(8, 64)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    accelerator.gather(torch.tensor([1.0]))
    if ending == "destroy":
        accelerator.end_training()
    elif ending == "exit":
        os._exit(0)
    elif ending == "leave":
        from agentrl.train.distributed import leave

        leave(accelerator)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--ending", choices=ENDINGS, default="leave")
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)  # torchrun starts the ranks with it
    args = parser.parse_args()
    if args.rank:
        rank(args.ending)
        return
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", __file__]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    aborted = 0
    for run in range(1, args.runs + 1):
        done = subprocess.run([*command, "--rank", "--ending", args.ending], env=env, capture_output=True, text=True)
        failed = done.returncode != 0 or "terminate called" in done.stdout + done.stderr
        aborted += failed
        print(f"run {run}/{args.runs}: {'aborted' if failed else 'clean'} (exit {done.returncode})", flush=True)
    print(f"ending={args.ending}: {aborted} of {args.runs} runs aborted")


if __name__ == "__main__":
    main()
