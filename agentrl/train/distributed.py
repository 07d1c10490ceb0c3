"""Several training ranks: agentrl starts them through accelerate, and the ranks agree on their work.

`agentrl train hardware=multi_gpu hardware.num_processes=8` (or `hardware=cpu_ddp`) runs Hydra as
usual; the job then re-runs itself as `accelerate launch ... -m agentrl.cli train <the job's overrides>`
with the job's own folder, so the user never writes an `accelerate launch` line, Hydra multiruns and
sweepers work unchanged (each job launches its own ranks) and the job returns what rank 0 measured.

Inside the ranks, the helpers below keep the collectives in step: groups are split across ranks
whole, every rank pads its batch to the same number of rows (so every rank runs the same number of
equally sized micro-batches: TRL's loss gathers metrics across ranks), and metrics are reduced.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from agentrl.errors import UserError

RESULT_FILE = "result.json"  # rank 0 writes the job's return value here for the launching process

# Metrics of a rank's own rows that add up across ranks; "time/" metrics take the slowest rank; everything
# else is a mean (rollout/* success and friends are computed from every rank's episodes, so all ranks agree).
SUMMED_METRICS = {"rollout/rows", "rollout/completion_tokens", "replay/groups_injected", "replay/episodes_added"}


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_rank_process() -> bool:
    """True inside a process that accelerate (torchrun) started as a training rank: one of several, or the one
    rank that agentrl launched for a sharded strategy (the launching process names itself to its ranks)."""
    from agentrl.train.stopping import LAUNCHER_PID

    return world_size() > 1 or LAUNCHER_PID in os.environ


def needs_launch(hardware: Any) -> bool:
    """Several ranks, or a sharded strategy: accelerate wraps the model for FSDP or DeepSpeed only in processes
    that its launcher started, even when there is one (FSDP on one GPU, with its CPU offloading, say)."""
    return (hardware.num_processes > 1 or hardware.strategy != "ddp") and not is_rank_process()


# --------------------------------------------------------------------------- launching


def config_file(hardware: Any) -> Path | None:
    """The accelerate config for the strategy: hardware.accelerate_config, else conf/accelerate/<strategy>.yaml."""
    if hardware.accelerate_config:
        return Path(hardware.accelerate_config).expanduser()
    strategy = hardware.strategy
    if strategy == "ddp":
        return None  # plain DDP needs no config file: the flags below say it all
    from agentrl.hydra_paths import config_dir

    return config_dir() / "accelerate" / f"{strategy}.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_command(hardware: Any, overrides: Sequence[str], run_dir: Path, machines: Any = None) -> list[str]:
    """`python -m accelerate.commands.launch <flags> -m agentrl.cli train <overrides> hydra.run.dir=<run_dir>`;
    `machines` (train/machines.py: this_machine) places this machine among several."""
    from agentrl.hydra_paths import hydra_quote
    from agentrl.train.machines import OFF_RUN_FOLDER, accelerate_flags, this_machine

    machines = this_machine(hardware) if machines is None else machines
    mixed = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[hardware.precision]
    flags = [
        *accelerate_flags(machines),
        "--mixed_precision",
        mixed,
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(machines.port or free_port()),
    ]

    cfg_file = config_file(hardware)
    if cfg_file is not None:
        flags = ["--config_file", str(cfg_file), *flags]
    else:
        # accelerate's torchrun launcher; on CPU the ranks then run Accelerator(cpu=True) over gloo
        # (accelerate's own --cpu flag would start a single process).
        flags.append("--multi_gpu")
    job_args = [o for o in overrides if not o.startswith("hydra.run.dir=")]
    if machines.rank > 0:
        job_args += OFF_RUN_FOLDER  # machine 0's ranks write the run folder's .hydra/ and log
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *flags,
        "-m",
        "agentrl.cli",
        "train",
        *job_args,
        f"hydra.run.dir={hydra_quote(str(run_dir))}",
    ]


def launch_ranks(cfg: Any, overrides: Sequence[str], run_dir: Path) -> float:
    """Run the training job on hardware.num_processes ranks (this machine's share of them, with several machines:
    train/machines.py) and return rank 0's held-out success.

    The ranks run in a session of their own, so that a Ctrl-C reaches this process alone: it asks the ranks to
    stop through the run folder (agentrl/train/stopping.py), and they stop together after the iteration in
    progress. A second Ctrl-C ends them at once; so does this process's death (each rank watches it)."""
    from agentrl.errors import Stopped
    from agentrl.train import machines as several
    from agentrl.train import stopping

    machines = several.this_machine(cfg.hardware)
    command = launch_command(cfg.hardware, overrides, run_dir, machines)
    result = run_dir / RESULT_FILE
    stop_file = run_dir / stopping.STOP_FILE
    if machines.rank == 0:  # the run folder is machine 0's (shared with the others)
        result.unlink(missing_ok=True)
        stop_file.unlink(missing_ok=True)
    if machines.count > 1:
        print(
            f"machine {machines.rank} of {machines.count}: waiting up to {machines.join_timeout_s:g} s for the "
            f"other machines at {machines.main_ip}:{machines.port}",
            flush=True,
        )
        several.join(machines)
        print(
            f"launching {machines.per_machine} of the {machines.ranks} ranks ({cfg.hardware.strategy}) on machine "
            f"{machines.rank} of {machines.count} through accelerate; run folder {run_dir}",
            flush=True,
        )
    else:
        print(
            f"launching {cfg.hardware.num_processes} ranks ({cfg.hardware.strategy}) through accelerate; "
            f"run folder {run_dir}",
            flush=True,
        )
    env = {**os.environ, stopping.LAUNCHER_PID: str(os.getpid())}
    proc = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_ignore_preemption_signal)

    def at_once(signum: int) -> str:
        try:
            os.killpg(proc.pid, 9)  # the launcher of the ranks; the ranks follow this process when it exits
        except OSError:
            pass
        return (
            f"stopped the {cfg.hardware.num_processes} ranks at once on a second {stopping.signal_name(signum)}; "
            + (
                f"the last complete checkpoint is under {run_dir / 'checkpoints'}; "
                f"resume: {stopping.resume_command(overrides, run_dir)}"
            )
        )

    request = stopping.StopRequest(
        at_once, on_request=lambda signum: stop_file.write_text(stopping.signal_name(signum))
    )
    request.install()
    try:
        code = proc.wait()
    finally:
        request.uninstall()
    if code != 0:
        raise UserError(
            f"the {cfg.hardware.num_processes} training ranks stopped with exit code {code} "
            f"(their messages are above; log: {run_dir / 'train.log'})"
        )
    try:
        outcome = json.loads(result.read_text())
        stopped = outcome.get("stopped")
        if stopped is not None:
            line = str(stopped["line"])
            if stopped.get("command"):  # rank 0's resume command; each machine's has its own machine_rank
                line = line.replace(str(stopped["command"]), stopping.resume_command(overrides, run_dir))
            request.hand_on_to_submitit(line)  # under submitit, its signal requeues the job (and exits)
            signum = request.signum or int(stopped["signal"])
            raise Stopped(line, stopping.exit_code(signum))
        return float(outcome["eval/success"])
    except (OSError, ValueError, KeyError):
        raise UserError(f"the training ranks finished but left no {result}") from None


def _ignore_preemption_signal() -> None:
    """In the ranks' launcher (torchrun), before it starts: submitit's preemption signal is this process's to
    handle; torchrun would die of it (its default action) and leave the ranks without their rendezvous."""
    from agentrl.train.stopping import preemption_signal

    signum = preemption_signal()
    if signum is not None:
        import signal

        signal.signal(signum, signal.SIG_IGN)


def write_result(run_dir: Path, success: float, stopped: dict | None = None) -> None:
    """Rank 0's outcome for the launching process: the held-out success, or where the run stopped on a signal."""
    (run_dir / RESULT_FILE).write_text(json.dumps({"eval/success": success, "stopped": stopped}))


# --------------------------------------------------------------------------- inside the ranks


def leave(accelerator: Any) -> NoReturn:
    """End a rank that has done its work (its outcome in RESULT_FILE, its checkpoint and logs written): leave the
    process group, flush the logs, and exit with 0 at once, without the interpreter's finalization.

    In that finalization gloo's threads can abort a rank that has finished ("terminate called without an active
    exception", SIGABRT), and the launching process then reports a crash (docs/architecture.md, "How a rank
    ends", has the measurements)."""
    if accelerator.num_processes > 1:
        # rank 0 has written RESULT_FILE before any rank ends: the launching process of every machine reads it
        accelerator.wait_for_everyone()
    accelerator.end_training()  # destroy_process_group: every rank has passed its last collective
    logging.shutdown()  # flushes and closes the handlers (train.log), as an ordinary exit would
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    from agentrl.train.machines import exit_last

    exit_last()  # on machine 0 of several: after the other machines' ranks
    os._exit(0)


def on_every_rank(accelerator: Any, flag: bool) -> bool:
    """True when the flag holds on every rank (a collective when there are several)."""
    if accelerator.num_processes == 1:
        return flag
    import torch

    flags = accelerator.gather(torch.tensor([float(flag)], device=accelerator.device))
    return bool(flags.min() > 0)


def reduce_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """One record from every rank's metrics: sums for counts, the slowest rank for times, else the mean.

    A key that only some ranks have (rank-0 evaluation, say) is reduced over those ranks."""
    keys = sorted({k for metrics in per_rank for k in metrics})
    out = {}
    for key in keys:
        values = [float(m[key]) for m in per_rank if key in m]
        if key in SUMMED_METRICS:
            out[key] = sum(values)
        elif key.startswith("time/"):
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    return out
