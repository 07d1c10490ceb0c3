"""Generation from the bfloat16 rounding of a model's weights (`rollout.generate_in_bf16`).

On a CPU a bf16 run keeps its weights in fp32 and computes under autocast, so that AdamW's small steps are not lost
to bf16's 8-bit mantissa (models/load.py, `weights_precision`). Generation under autocast keeps the residual stream
and the elementwise work around the bf16 matmuls in fp32; with bf16 weights all of it runs in bf16, which
on a 2-core CPU took the generation of SmolLM2's CPU recipe from 68.4 to 50.0 s an iteration (docs/models.md,
"Generating in bf16").

The weights are swapped in place rather than copied into a second model: the trained model's forward may be wrapped
by an instance-level patch (TRL's fused LM head wraps it with a closure over the original bound method), and a deep
copy would keep calling the original model through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def weights_in_bf16(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`model` with its floating-point parameters rounded to bfloat16 for the duration, then given back their own
    fp32 tensors, the same objects, untouched: the optimizer's state, the gradients and anything that holds the
    parameters see no change. Buffers keep their dtype (the rotary frequencies stay float32, as in a model loaded in
    bf16). For generation only (no gradient may flow through the rounded weights)."""
    kept = [(p, p.data) for p in model.parameters() if p.is_floating_point() and p.dtype != torch.bfloat16]
    try:
        for p, data in kept:
            p.data = data.to(torch.bfloat16)
        yield model
    finally:
        for p, data in kept:
            p.data = data
