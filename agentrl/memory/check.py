"""The memory plan of a composed config, shown (`agentrl config`) and enforced (`agentrl train`).

The maths is agentrl/memory/plan.py; this module reads what it needs from a composed config (the sizes per device,
the model's shape from its config.json, the device's memory), words the refusal (one line that names the keys
bringing the estimate down) and prints the split.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from agentrl import registry_models
from agentrl.errors import UserError
from agentrl.memory import plan as mp

# Keys that shrink each phase of an iteration, in the order a user would try them
UPDATE_KEYS = ("trainer.micro_batch_tokens", "trainer.micro_batch_size")
GENERATION_KEYS = (
    "trainer.tasks_per_iteration",
    "trainer.group_size",
    "rollout.max_new_tokens",
    "rollout.max_prompt_tokens",
)
# the phase that holds each term; the others are held all along
PHASE = (
    {name: "update" for name in mp.MemoryPlan.update}
    | {name: "generation" for name in mp.MemoryPlan.generation}
    | {name: "build" for name in mp.MemoryPlan.build}
)
# Keys that shrink the tiny model's build (where the run builds one first)
BUILD_KEYS = ("rollout.max_prompt_tokens", "model.tiny.demo_turns", "model.tiny.warmup_batch_size")
# The GPU a plan made without one (a laptop, before going to the cluster) sizes vLLM's share on: an 80 GB H100 or A100
# as nvidia-smi reports it (81,559 MiB)
PLANNED_GPU_BYTES = 81559 * 1024**2


def workload(cfg: Any, device_bytes: int | None) -> mp.Workload:
    """The plan's sizes for one device of `cfg` (a composed training config)."""
    hw, t, r = cfg.hardware, cfg.trainer, cfg.rollout
    device, ranks = hw.device, hw.num_processes
    rows = t.micro_batch_size
    if t.mini_batch_size is not None:
        rows = min(rows, math.ceil(t.mini_batch_size / ranks))
    vllm = r.backend == "vllm"
    episodes = max(t.tasks_per_iteration * t.group_size, cfg.eval.num_tasks * cfg.eval.episodes_per_task)
    colocated = vllm and r.vllm.mode == "colocate"
    strategy = hw.strategy if ranks > 1 else "ddp"
    lora = cfg.model.lora
    return mp.Workload(
        # a CPU keeps fp32 weights whatever the precision (bf16 there is autocast: models.weights_precision)
        bytes_per_value=mp.FP32 if hw.precision == "fp32" or device == "cpu" else 2,
        device=device,
        micro_batch_rows=rows,
        max_prompt_tokens=r.max_prompt_tokens,
        max_new_tokens=r.max_new_tokens,
        micro_batch_tokens=t.micro_batch_tokens,
        gradient_checkpointing=bool(t.gradient_checkpointing),
        reference=cfg.algo.kl_coef > 0 and not lora.enabled,
        lora_rank=lora.rank if lora.enabled else None,
        lora_targets=tuple(lora.target_modules),
        generation_rows=0 if vllm else math.ceil(episodes / ranks),
        vllm_bytes=int(r.vllm.gpu_memory_utilization * _engine_device_bytes(device, device_bytes)) if colocated else 0,
        shards=ranks if strategy in ("deepspeed_zero3", "fsdp") else 1,
        optimizer_shards=ranks if strategy == "deepspeed_zero2" else 1,
        generate_in_bf16=bool(r.generate_in_bf16),
        **tiny_build_sizes(cfg),
    )


def tiny_build_sizes(cfg: Any) -> dict[str, int]:
    """The Workload's build fields where the run builds the tiny model before it starts (no model.path, and neither
    the shipped build nor a cached one fits the config), else none."""
    tiny_cfg = cfg.model.tiny
    if tiny_cfg is None or cfg.model.path:
        return {}
    from agentrl.models import tiny

    if tiny.available_build(tiny_cfg, cfg.env) is not None:
        return {}
    return {
        "build_pairs": tiny.demonstration_turns(tiny_cfg, cfg.env.name),
        "build_rows": tiny_cfg.warmup_batch_size,
        "build_prompt_tokens": tiny_cfg.max_prompt_tokens,
    }


def _engine_device_bytes(device: str, device_bytes: int | None) -> int:
    """The memory vLLM's colocated share is taken of: this machine's device, or, where it has no GPU to ask,
    `PLANNED_GPU_BYTES` for a CUDA plan (0 for a CPU that cannot say)."""
    if device_bytes:
        return device_bytes
    return PLANNED_GPU_BYTES if device == "cuda" else 0


def planned_gpu_note(cfg: Any, memory: int | None) -> str | None:
    """The line a plan shows where vLLM's share is of `PLANNED_GPU_BYTES`, not of a GPU of this machine."""
    r = cfg.rollout
    if memory or cfg.hardware.device != "cuda" or r.backend != "vllm" or r.vllm.mode != "colocate":
        return None
    return f"no GPU here: vLLM's {r.vllm.gpu_memory_utilization} share is of an 80 GB GPU ({gib(PLANNED_GPU_BYTES)})"


def model_shape(model_cfg: Any) -> mp.ModelShape | None:
    """The model's shape without loading it: the tiny model's own fields, model.path's config.json, a cached
    registry model's config.json, the hub id's
    config.json in the local Hugging Face cache, or a Qwen2.5 size agentrl knows (agentrl/models/qwen_shapes.py); None
    when none of these says."""
    tiny = model_cfg.tiny
    if tiny is not None:
        return mp.ModelShape(
            vocab_size=tiny.vocab_size,
            hidden_size=tiny.hidden_size,
            num_layers=tiny.num_layers,
            intermediate_size=tiny.intermediate_size,
            num_heads=tiny.num_heads,
            num_kv_heads=tiny.num_kv_heads or tiny.num_heads,
        )
    config = None
    if model_cfg.path:
        config = _read_json(Path(model_cfg.path).expanduser() / "config.json")
    elif model_cfg.registry:  # built on first use: its shape is known once it is in the cache
        config = _read_json(registry_models.model_folder(model_cfg.registry) / "config.json")
    elif model_cfg.hub_id:
        config = _cached_hub_config(model_cfg.hub_id) or _known_qwen_config(model_cfg.hub_id)
    try:
        return mp.ModelShape.from_hf_config(config) if config else None
    except (KeyError, TypeError, ValueError):
        return None  # not a decoder config the plan understands


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _cached_hub_config(hub_id: str) -> dict | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(hub_id, "config.json")
    except Exception:  # an id the hub library rejects: the loader will say so
        return None
    return _read_json(Path(found)) if isinstance(found, str) else None


def _known_qwen_config(hub_id: str) -> dict | None:
    from agentrl.models.qwen_shapes import QWEN25_VOCAB_SIZE, SIZES

    for size, numbers in SIZES.items():
        if hub_id.lower() == f"qwen/qwen2.5-{size}-instruct":
            return {**numbers, "vocab_size": QWEN25_VOCAB_SIZE, "model_type": "qwen2"}
    return None


def device_memory(hardware: Any) -> int | None:
    """Bytes of one device: the host's RAM on CPU (psutil, else /proc/meminfo), the first GPU's memory on CUDA;
    None where this machine cannot say (no /proc, no CUDA)."""
    if hardware.device == "cuda":
        import torch

        return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def plan_of(cfg: Any) -> tuple[mp.MemoryPlan, mp.ModelShape, mp.Workload, int | None] | None:
    """(plan, shape, workload, this machine's device memory) for `cfg`, or None when its model's shape cannot be read
    without loading it."""
    shape = model_shape(cfg.model)
    if shape is None:
        return None
    memory = device_memory(cfg.hardware)
    work = workload(cfg, memory)
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
    ranks = sharing_ranks(cfg)
    if estimate.peak * ranks > memory:
        raise UserError(refusal(cfg, estimate, shape, work, memory // ranks))


def sharing_ranks(cfg: Any) -> int:
    """How many ranks share one device's memory: on CPU every rank of the machine shares its RAM (each machine runs
    its share of hardware.num_processes); a GPU is one rank's."""
    hw = cfg.hardware
    return hw.num_processes // hw.num_machines if hw.device == "cpu" else 1


def refusal(cfg: Any, estimate: mp.MemoryPlan, shape: mp.ModelShape, work: mp.Workload, memory: int) -> str:
    """The refusal line: the estimate, the device's memory, and the keys that bring the larger phases down."""
    staying = estimate.staying_bytes
    keys: list[str] = []
    if staying + estimate.build_bytes > memory:
        keys.extend(BUILD_KEYS)
    if staying + estimate.update_bytes > memory:
        budget = mp.largest_fitting_budget(shape, work, memory)
        keys.append(f"trainer.micro_batch_tokens={budget}" if budget else UPDATE_KEYS[0])
        keys.append(UPDATE_KEYS[1])
        if not cfg.trainer.gradient_checkpointing:
            keys.append("trainer.gradient_checkpointing=true")
    if staying + estimate.generation_bytes > memory:
        keys.extend(GENERATION_KEYS)
        if cfg.hardware.device == "cuda" and cfg.rollout.backend == "hf":
            keys.append("rollout.backend=vllm")
    if not cfg.model.lora.enabled:
        keys.append("model.lora.enabled=true")
    ranks = sharing_ranks(cfg)
    where = f"this {'GPU' if cfg.hardware.device == 'cuda' else 'machine'}'s {gib(memory)}"
    if ranks > 1:
        where += f" per rank ({ranks} ranks share its memory)"
    return (
        f"the memory plan estimates {gib(estimate.peak)} per device ({estimate.larger_phase} phase), more than "
        f"{where}; bring it down with {', '.join(keys)}, or run anyway with "
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
    if note := planned_gpu_note(cfg, memory):
        lines.append(f"  {note}")
    return "\n".join(lines)


def plan_table(cfg: Any):
    """The plan as a rich table (for a terminal), or its plain text when there is no estimate."""
    from rich.table import Table

    found = plan_of(cfg)
    if found is None:
        return plan_text(cfg)
    estimate, _, _, memory = found
    against = f" of {gib(memory)}" if memory else ""
    title = f"memory plan: peak {gib(estimate.peak)} per device{against} ({estimate.larger_phase} phase)"
    note = planned_gpu_note(cfg, memory)
    table = Table(title=title, title_justify="left", min_width=len(title), caption=note, caption_justify="left")
    table.add_column("term")
    table.add_column("GiB", justify="right")
    table.add_column("held")
    for name, size in estimate.terms.items():
        table.add_row(name, f"{size / mp.GIB:.2f}", PHASE.get(name, "always"))
    return table
