"""The job function Hydra runs, and how a multirun's failed jobs reach the sweeping command.

`agentrl train` and `agentrl eval` hand `Jobs.run` to Hydra's main (agentrl/cli/launch.py). Each job types its
config (config/typed.py: the schema's dataclasses, which everything below reads) and checks it, then what this
machine must have (config/checks.py: check_host: only a job that runs needs vLLM, CUDA or GPUs), then runs. In a
multirun a failed job is recorded as FAILED.json in its folder and the others go on; the sweeping command then exits
non-zero and names the failed jobs. Under the basic launcher the jobs run in the sweeping process and are counted
there; under submitit's launchers they run elsewhere (a Slurm node, a local worker process), so the sweeping command
reads their FAILED.json files from the sweep folder, and a job that died without writing one (killed, out of
memory) is named from submitit's own error.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.errors import Stopped, UserError, debug_enabled, fail, first_line

FAILED = "FAILED.json"  # <job folder>/FAILED.json: a failed job's error, overrides and traceback


@dataclass
class Jobs:
    """The job function Hydra runs for one `run_hydra` call, and what it recorded.

    In a multirun a failed job is recorded (FAILED.json in its folder) and returns None, so that the sweep
    goes on: Optuna's sweeper records a trial whose value is not a number as failed. NaN would not do: with
    optuna 2.x (which every hydra-optuna-sweeper release requires) `study.tell` raises on NaN, the sweeper's
    recovery raises in turn, and the whole search ends. So a NaN objective is handed on as None too.

    A job stopped on a signal (errors.Stopped) ends the whole command, with the job's line, when the jobs run
    here; under submitit's launcher (a job of its own) it is recorded as a failed job with that line."""

    entry: Callable
    full_error_set: bool  # run_hydra set HYDRA_FULL_ERROR for the sweeper; jobs and their children must not see it
    count: int = 0
    failed: list[str] = field(default_factory=list)

    def run(self, cfg):
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        from agentrl.config.checks import check_config, check_host
        from agentrl.config.typed import typed

        hc = HydraConfig.get()
        multirun = hc.mode == RunMode.MULTIRUN
        self.count += 1
        if self.full_error_set:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        try:
            cfg = typed(cfg)  # the schema's dataclasses from here on (config/typed.py)
            check_config(cfg)
            check_host(cfg)
            result = self.entry(cfg)
            if multirun and isinstance(result, float) and math.isnan(result):
                print(f"warning: job {hc.job.num} has no objective (NaN); recorded as a failed trial", file=sys.stderr)
                return None
            return result
        except Stopped as stop:
            if not (multirun and os.environ.get("SUBMITIT_EXECUTOR")):
                raise
            if int(os.environ.get("SLURM_PROCID", "0") or 0) > 0:
                # a node other than the first of a job on several: the first task records the job and requeues it
                print(str(stop), file=sys.stderr, flush=True)
                return None
            self._record(hc, stop)
            return None
        except Exception as err:  # UserError included: in a multirun every failure is recorded
            if not multirun:
                if isinstance(err, UserError) and not debug_enabled():
                    fail(str(err), err.exit_code)
                raise
            self._record(hc, err)
            return None
        finally:
            if self.full_error_set:
                os.environ["HYDRA_FULL_ERROR"] = "1"

    def _record(self, hc, err: BaseException) -> None:
        job_dir, message = Path(hc.runtime.output_dir), first_line(err)
        failed = {"error": message, "type": type(err).__name__, "overrides": list(hc.overrides.task)}
        (job_dir / FAILED).write_text(json.dumps({**failed, "traceback": traceback.format_exc()}, indent=2))
        self.failed.append(f"{job_dir}: {message}")
        print(f"error: job {hc.job.num} ({' '.join(hc.overrides.task)}) failed: {message}", file=sys.stderr)

    def summary(self) -> str:
        if self.count and len(self.failed) >= self.count:
            return f"all {len(self.failed)} job(s) failed; first: {self.failed[0]}"
        return f"{len(self.failed)} job(s) failed, the others finished; first: {self.failed[0]}"


def failed_under(sweep_dir: Path | None, since: float, known: list[str]) -> list[str]:
    """The failures that jobs run by a launcher in other processes recorded under the sweep folder since
    `since` (this command's start), as '<job folder> (overrides): error', leaving out those already `known`."""
    if sweep_dir is None or not sweep_dir.is_dir():
        return []
    found = []
    for path in sorted(sweep_dir.rglob(FAILED)):
        if path.stat().st_mtime < since - 1 or any(str(path.parent) in line for line in known):
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        overrides = " ".join(record.get("overrides", []))
        found.append(f"{path.parent} ({overrides}): {record.get('error', 'failed')}")
    return found


def launcher_failure(err: BaseException) -> str | None:
    """One line for a job that submitit's launcher reports as dead (no result: killed, out of memory, a crash
    outside agentrl's job function), naming the job; None for any other error."""
    kinds = ("FailedJobError", "UncompletedJobError", "FailedSubmissionError")
    error = err
    while error is not None and type(error).__name__ not in kinds:
        error = error.__cause__ or error.__context__
    if error is None:
        return None
    return f"a job of the sweep failed under submitit's launcher: {first_line(error)}"
