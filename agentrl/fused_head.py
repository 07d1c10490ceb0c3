"""TRL's fused LM head scores the completion's positions only, on every device.

TRL 1.16's fused LM head (`trl.trainer.utils.add_fused_lm_head`) serves RL's log-prob pass (agentrl/train/). It
projects the backbone's hidden states through the LM head in tiles, so that the `(rows, positions, vocabulary)`
logits never exist at once. Where Triton runs (CUDA, XPU) it projects only the positions whose next token is scored,
the completion's. Elsewhere it projects every position, the prompt's too, and masks the prompt's results away
afterwards: TRL does that for devices that compile each tile shape (Neuron), where a varying number of scored
positions would recompile on every batch. A CPU compiles nothing, and there the prompt's positions are wasted work:
a household turn's row holds about 340 prompt tokens and 10 completion tokens, and the head's projection (576 x
49,152 for SmolLM2) ran over all 350, forward, recomputed in the backward, and backward again (docs/architecture.md,
"The log-prob pass").

`score_completion_only()` makes TRL take its compact path (the positions with a label, as on CUDA) on a CPU
too. The compact path is TRL's own code, the one a GPU runs; only its choice of path is changed. Values and
gradients are those of the same tiles over fewer rows (tests/train/test_logps_tiles.py holds them against the
full-logits computation). `agentrl sft` takes the compact path on a CPU too (agentrl/models/fine_tune.py); the tiny
model's warm-up takes its loss from the full logits instead (the tiny model the compact path built at two threads
learned less; docs/architecture.md, "The warm start").
"""

from __future__ import annotations

# Device types on which TRL's fused head should project the scored positions only: its Triton devices, and
# the CPU (no compilation, so a varying number of positions costs nothing).
COMPACT_DEVICES = ("cuda", "xpu", "cpu")


def score_completion_only() -> bool:
    """Make TRL's fused LM head score only the positions with a label on a CPU, as it does on CUDA; True if done.

    TRL 1.16 decides with `trl.trainer.utils._use_triton(device)` (a private name, read at call time) and
    uses nothing else of that name in that module; the kernels keep their own. Where the name is missing (another
    TRL), nothing changes and the prompt's positions are scored as before."""
    import trl.trainer.utils as trl_utils

    decide = getattr(trl_utils, "_use_triton", None)
    if decide is None or getattr(decide, "agentrl_compact", False):
        return decide is not None

    def compact_positions(device) -> bool:
        return decide(device) or device.type in COMPACT_DEVICES

    compact_positions.agentrl_compact = True
    trl_utils._use_triton = compact_positions
    return True
