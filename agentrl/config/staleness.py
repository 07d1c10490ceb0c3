"""The check of `rollout.max_staleness` (rows generated ahead of the update; agentrl/train/async_rollout.py)."""

from __future__ import annotations

from typing import Any

from agentrl.config.values import Backend
from agentrl.errors import UserError


def check_max_staleness(rollout: Any, hardware: Any) -> None:
    """rollout.max_staleness >= 1 runs a rollout worker beside the update: on one rank, with HF generation."""
    k = rollout.max_staleness
    if not k:
        return
    if rollout.backend != Backend.hf:
        raise UserError(
            f"rollout.max_staleness={k} generates with HF on a copy of the policy; rollout.backend={rollout.backend} "
            "is not supported with it yet: use rollout.backend=hf, or rollout.max_staleness=0"
        )
    if hardware.num_processes > 1:
        raise UserError(
            f"rollout.max_staleness={k} runs on one rank; hardware.num_processes={hardware.num_processes} is not "
            "supported with it yet: use hardware.num_processes=1, or rollout.max_staleness=0"
        )
