"""The checks of `rollout.max_staleness` (rows generated ahead of the update; agentrl/train/async_rollout.py) and
of `rollout.turns` (turns without lockstep; agentrl/rollout/ready_turns.py)."""

from __future__ import annotations

from typing import Any

from agentrl.config.values import Backend, Device, Precision, VllmMode
from agentrl.errors import UserError


def check_max_staleness(rollout: Any, hardware: Any) -> None:
    """rollout.max_staleness >= 1 runs a rollout worker beside the update, on one rank: HF generation on a copy of
    the policy, or TRL's colocated vLLM engine, into which the worker loads each job's weights itself."""
    k = rollout.max_staleness
    if not k:
        return
    if rollout.backend == Backend.vllm:
        if rollout.vllm.mode == VllmMode.server:
            raise UserError(
                f"rollout.max_staleness={k} loads each rollout's weights into the engine it generates on, and TRL's "
                "weight sync to a server goes through NCCL on CUDA and is not built for the rollout worker: "
                "rollout.vllm.mode=server is not supported with it; use rollout.vllm.mode=colocate, or "
                "rollout.max_staleness=0"
            )
        if rollout.vllm.enable_sleep_mode:
            raise UserError(
                f"rollout.max_staleness={k} generates while the trainer updates, so the engine has no time to sleep: "
                "rollout.vllm.enable_sleep_mode=true is not supported with it; use "
                "rollout.vllm.enable_sleep_mode=false, or rollout.max_staleness=0"
            )
    if hardware.num_processes > 1:
        raise UserError(
            f"rollout.max_staleness={k} runs on one rank (with several, the worker's rollouts would need collectives "
            f"across ranks beside the update's): hardware.num_processes={hardware.num_processes} is not supported "
            "with it yet; use hardware.num_processes=1, or rollout.max_staleness=0"
        )


def check_turns(cfg: Any) -> None:
    """rollout.turns=ready: environments answering in worker processes, and generation whose rows do not depend on
    the batch, which agentrl has measured for HF generation on a CPU in fp32 with eager attention only."""
    r, hw = cfg.rollout, cfg.hardware
    if r.turns == "lockstep":
        return
    if not hasattr(cfg, "trainer"):
        fix = "applies to training rollouts only (agentrl eval plays in lockstep): use"
    elif getattr(cfg.env, "num_workers", 0) < 1:
        fix = "steps the environments in worker processes (in process, they share python's random): use "
        fix += "env.num_workers=2, or"
    elif r.backend != Backend.hf:
        fix = f"generates with HF; rollout.backend={r.backend} is not supported with it: use rollout.backend=hf, or"
    elif hw.num_processes > 1:
        fix = f"runs on one rank; hardware.num_processes={hw.num_processes} is not supported with it yet: use "
        fix += "hardware.num_processes=1, or"
    elif hw.device != Device.cpu or hw.precision != Precision.fp32 or r.generate_in_bf16:
        fix = "needs rows that do not depend on their batch, measured on a CPU in fp32 only: use hardware=cpu, or"
    elif getattr(cfg.model, "attn_implementation", None) != "eager":
        fix = "needs rows that do not depend on their batch, which SDPA's are not: use "
        fix += "model.attn_implementation=eager, or"
    else:
        return
    raise UserError(f"rollout.turns={r.turns} {fix} rollout.turns=lockstep")
