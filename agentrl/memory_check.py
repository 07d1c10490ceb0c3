"""The memory plan of a composed config, shown (`agentrl config`) and enforced (`agentrl train`).

The maths is agentrl/memory_plan.py; this module reads the machine's memory, words the refusal (one line that
names the keys bringing the estimate down) and prints the split.
"""

from __future__ import annotations

from typing import Any

from agentrl import memory_plan as mp
from agentrl.config import plain_value
from agentrl.errors import UserError

# Keys that shrink each phase of an iteration, in the order a user would try them
UPDATE_KEYS = ("trainer.micro_batch_tokens", "trainer.micro_batch_size")
GENERATION_KEYS = (
    "trainer.tasks_per_iteration",
    "trainer.group_size",
    "rollout.max_new_tokens",
    "rollout.max_prompt_tokens",
)
# the phase that holds each term; the others are held all along
PHASE = {name: "update" for name in mp.MemoryPlan.update} | {name: "generation" for name in mp.MemoryPlan.generation}


def plan_of(cfg: Any) -> tuple[mp.MemoryPlan, mp.ModelShape, mp.Workload, int | None] | None:
    """(plan, shape, workload, this machine's device memory) for `cfg`, or None when its model's shape cannot be read
    without loading it."""
    shape = mp.model_shape(cfg.model)
    if shape is None:
        return None
    memory = mp.device_memory(cfg.hardware)
    work = mp.workload(cfg, memory)
    return mp.plan(shape, work), shape, work, memory


def check_memory(cfg: Any) -> None:
    """Refuse, in one line, a run whose estimated peak per device is above the device's memory (unless
    trainer.memory_check=false, or the model's shape or the machine's memory is unknown)."""
    if not cfg.trainer.memory_check:
        return
    found = plan_of(cfg)
    if found is None or found[3] is None:
        return
    estimate, shape, work, memory = found
    if estimate.peak > memory:
        raise UserError(refusal(cfg, estimate, shape, work, memory))


def refusal(cfg: Any, estimate: mp.MemoryPlan, shape: mp.ModelShape, work: mp.Workload, memory: int) -> str:
    """The refusal line: the estimate, the device's memory, and the keys that bring the larger phases down."""
    staying = estimate.peak - max(estimate.update_bytes, estimate.generation_bytes)
    keys: list[str] = []
    if staying + estimate.update_bytes > memory:
        budget = mp.largest_fitting_budget(shape, work, memory)
        keys.append(f"trainer.micro_batch_tokens={budget}" if budget else UPDATE_KEYS[0])
        keys.append(UPDATE_KEYS[1])
        if not cfg.trainer.gradient_checkpointing:
            keys.append("trainer.gradient_checkpointing=true")
    if staying + estimate.generation_bytes > memory:
        keys.extend(GENERATION_KEYS)
        if plain_value(cfg.hardware.device) == "cuda" and plain_value(cfg.rollout.backend) == "hf":
            keys.append("rollout.backend=vllm")
    if not cfg.model.lora.enabled:
        keys.append("model.lora.enabled=true")
    device = "GPU" if plain_value(cfg.hardware.device) == "cuda" else "machine"
    return (
        f"the memory plan estimates {gib(estimate.peak)} per device ({estimate.larger_phase} phase), more than this "
        f"{device}'s {gib(memory)}; bring it down with {', '.join(keys)}, or run anyway with "
        "trainer.memory_check=false (`agentrl config` shows the plan)"
    )


def gib(size: int) -> str:
    return f"{size / mp.GIB:.2f} GiB"


def plan_text(cfg: Any) -> str:
    """The plan as plain text: the peak, then one line per term."""
    found = plan_of(cfg)
    if found is None:
        return "memory plan: the model's config.json cannot be read without loading it (no estimate)"
    estimate, _, _, memory = found
    against = f" of this machine's {gib(memory)}" if memory else ""
    lines = [f"memory plan: estimated peak {gib(estimate.peak)} per device{against} ({estimate.larger_phase} phase)"]
    for name, size in estimate.terms.items():
        lines.append(f"  {name:<12} {gib(size):>12}  {PHASE.get(name, 'always')}")
    return "\n".join(lines)


def plan_table(cfg: Any):
    """The plan as a rich table (for a terminal), or its plain text when there is no estimate."""
    from rich.table import Table

    found = plan_of(cfg)
    if found is None:
        return plan_text(cfg)
    estimate, _, _, memory = found
    against = f" of {gib(memory)}" if memory else ""
    table = Table(title=f"memory plan: peak {gib(estimate.peak)} per device{against} ({estimate.larger_phase} phase)")
    table.add_column("term")
    table.add_column("GiB", justify="right")
    table.add_column("held")
    for name, size in estimate.terms.items():
        table.add_row(name, f"{size / mp.GIB:.2f}", PHASE.get(name, "always"))
    return table
