"""The rules of several machines (hardware.num_machines), part of ``check_cross_fields`` (config/checks.py): the
ranks split evenly among the machines, and each machine knows its place, by hand (hardware.machine_rank and machine
0's address) or from the Slurm job (hardware.from_slurm). How the machines are launched: agentrl/train/machines.py."""

from __future__ import annotations

from typing import Any

from agentrl.config.run import HardwareConfig
from agentrl.config.values import Backend, VllmMode
from agentrl.errors import UserError

# the keys that place one machine among several; with one machine they cannot apply
_MACHINE_KEYS = ("machine_rank", "main_process_ip", "join_timeout_s")
# rollout.vllm.server_host's default: where `trl vllm-serve` listens, which names no machine to connect to
_UNNAMED_SERVER = "0.0.0.0"


def check_machines(hw: Any, rollout: Any) -> None:
    """Several machines (hardware.num_machines): the ranks split evenly among them, and each machine knows its place
    (by hand: machine_rank and machine 0's address; under Slurm, hardware.from_slurm takes them from the job)."""
    count = hw.num_machines
    if count == 1:
        changed = _changed(hw, _MACHINE_KEYS)
        if changed:
            raise _inapplicable(changed, hw, "with hardware.num_machines=1 (one machine)")
        return
    ranks = hw.num_processes
    if ranks % count:
        raise UserError(
            f"hardware.num_processes={ranks} counts the ranks of all {count} machines (as accelerate does) and must "
            f"split evenly among them; e.g. hardware.num_processes={count * max(1, ranks // count)} for "
            f"{max(1, ranks // count)} per machine"
        )
    if hw.from_slurm:
        changed = _changed(hw, ("machine_rank", "main_process_ip"))
        if changed:
            raise _inapplicable(changed, hw, "with hardware.from_slurm=true: each node takes it from the Slurm job")
    else:
        if hw.machine_rank >= count:
            raise UserError(
                f"hardware.machine_rank must be in [0, {count}) with hardware.num_machines={count}, got {hw.machine_rank}"
            )
        if hw.main_process_ip is None:
            raise UserError(
                f"hardware.num_machines={count} needs hardware.main_process_ip=<machine 0's address>, the same on "
                "every machine (under Slurm: hardware=slurm, which takes it from the job)"
            )
    v = rollout.vllm
    if rollout.backend == Backend.vllm and v.mode == VllmMode.server and v.server_host == _UNNAMED_SERVER:
        raise UserError(
            f"rollout.vllm.mode=server with hardware.num_machines={count} needs rollout.vllm.server_host=<the host "
            "that runs `trl vllm-serve`>: global rank 0 on machine 0 talks to it, and 0.0.0.0 names no host"
        )


def _changed(hw: Any, keys: tuple[str, ...]) -> list[str]:
    defaults = HardwareConfig()
    return [k for k in keys if getattr(hw, k) != getattr(defaults, k)]


def _inapplicable(keys: list[str], hw: Any, why: str) -> UserError:
    return UserError(f"{' '.join(f'hardware.{k}={getattr(hw, k)}' for k in keys)} has no effect {why}")
