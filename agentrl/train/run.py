"""`agentrl train` in three phases: `setup(cfg) -> Run`, `train(run)`, `finish(run)`.

- `setup`: the memory plan's check (agentrl/memory/check.py), the run folder's record, the resumed checkpoint, the
  environment suite, the model, the task sampler, the environment pool, the evaluator, the tracker and the trainer,
  with the signal handlers installed.
- `train`: ARPO's optional task selection (or the resumed agentrl state), then TRL's loop. A signal ends it
  (agentrl/train/stopping.py): a rollout in progress is abandoned, an update in progress finishes, and a
  checkpoint is written either way.
- `finish`: the pool and tracker close. A stopped run ends with its one line (`Stopped`); a finished one draws its
  learning curves and returns its final held-out success (Hydra sweepers optimise it).

`run_job(cfg)` is what the CLI calls: with several ranks it launches them (each then runs the three phases).
"""

from __future__ import annotations

import faulthandler
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl import metrics_log
from agentrl.checkpoints import CHECKPOINTS, LAST, checkpoint_name, resume_checkpoint, saved_iteration
from agentrl.cpu import batch_invariant_blas, crowded_line, set_torch_threads
from agentrl.errors import Stopped, UserError, first_line
from agentrl.hydra_paths import check_writable
from agentrl.memory.check import check_memory
from agentrl.report.curves import plot_run
from agentrl.run_folder import claim, record_end
from agentrl.train import distributed, machines, stopping

log = logging.getLogger(__name__)


@dataclass
class Run:
    """One training job's pieces, as `setup` built them."""

    cfg: Any
    folder: Path
    main_rank: bool
    resume_command: str  # the line that continues this run (`trainer.resume=auto`)
    request: stopping.StopRequest  # this process's signal handlers
    checkpoint: Path | None  # the checkpoint this run resumes from
    trainer: Any
    stop: stopping.StopCallback
    closing: list  # what `finish` closes: the environment pool, the tracker
    abandoned: stopping.IterationAbandoned | None = None  # a stop during a rollout
    success: float = float("nan")  # the final held-out success, once finished


def run_job(cfg: Any) -> float:
    """The CLI's entry: launch the ranks when the job needs several, else the three phases here."""
    from hydra.core.hydra_config import HydraConfig

    from agentrl.models.load import resolve_model_source

    hydra_cfg = HydraConfig.get()
    folder = Path(hydra_cfg.runtime.output_dir)
    check_writable(folder, "hydra.run.dir")  # a job of a sweep or of submitit makes its own folder
    # the launching process holds the folder for its ranks; nothing is written there before this
    if distributed.is_rank_process():
        faulthandler.enable()  # a rank that dies of a signal (SIGABRT, SIGSEGV) prints where its Python stack was
        if machines.on_other_machine():
            machines.keep_off_run_folder(folder)  # global rank 0 writes the run's log
        run = _run_here(cfg)
        # does not return: the outcome is in the run folder. Not after an error (the exception goes on), as the
        # other rank may still be in a collective, and leaving the group then could hang it.
        distributed.leave(run.trainer.accelerator)
    if machines.this_machine(cfg.hardware).rank > 0:
        return _launch_other_machine(cfg, list(hydra_cfg.overrides.task), folder)
    lock = claim(folder, cfg)
    try:
        if distributed.needs_launch(cfg.hardware):
            check_memory(cfg)  # before any rank starts
            resolve_model_source(cfg.model, cfg.env)  # build the tiny model once here, not in every rank at once
            success = distributed.launch_ranks(cfg, list(hydra_cfg.overrides.task), folder)
            record_end(folder, "finished", f"held-out success {success:.3f}")
            return success
        run = _run_here(cfg)
        record_end(folder, "finished", f"held-out success {run.success:.3f}")
    except (Stopped, KeyboardInterrupt) as stop:
        record_end(folder, "stopped", first_line(stop))
        raise
    except BaseException as err:
        record_end(folder, "crashed", first_line(err))
        raise
    finally:
        lock.release()
    return run.success


def _launch_other_machine(cfg: Any, overrides: list[str], folder: Path) -> float:
    """A machine other than machine 0 launches its share of the ranks into machine 0's run folder (a shared
    filesystem), which it neither claims nor records in: machine 0's process holds the folder."""
    from agentrl.models.load import resolve_model_source

    machines.keep_off_run_folder(folder)
    check_memory(cfg)
    resolve_model_source(cfg.model, cfg.env)
    return distributed.launch_ranks(cfg, overrides, folder)


def _run_here(cfg: Any) -> Run:
    """Set up, train and finish in this process; the held-out success lands in `run.success`."""
    run = setup(cfg)
    try:
        train(run)
    finally:
        run.request.uninstall()
    run.success = finish(run)
    return run


def setup(cfg: Any) -> Run:
    os.environ.setdefault("WANDB_SILENT", "true")
    from hydra.core.hydra_config import HydraConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress bar is the one to watch
    check_memory(cfg)  # from the model's config.json, before the model is built or loaded
    hydra_cfg = HydraConfig.get()
    folder = Path(hydra_cfg.runtime.output_dir)
    main_rank = int(os.environ.get("RANK", "0")) == 0
    if distributed.is_rank_process():
        stopping.watch_launcher()
    else:
        (folder / stopping.STOP_FILE).unlink(missing_ok=True)
    command = stopping.resume_command(list(hydra_cfg.overrides.task), folder)
    request = stopping.StopRequest(
        lambda signum: _stopped_at_once(signum, folder, command),
        quiet=not main_rank,
        stop_file=folder / stopping.STOP_FILE,
        # a single process stops at once in the setup; a rank waits for its launcher's request (STOP_FILE)
        before_start=None if distributed.is_rank_process() else lambda s: stopping.before_start_line(s, command),
    ).install()
    try:
        return _build(cfg, folder, main_rank, command, request, HydraConfig.get())
    except BaseException:
        request.uninstall()  # in-process multiruns go on to the next job
        raise


def _build(cfg: Any, folder: Path, main_rank: bool, command: str, request: stopping.StopRequest, hydra_cfg) -> Run:
    from transformers import set_seed

    from agentrl.envs.registry import make_suite
    from agentrl.envs.workers import make_pool
    from agentrl.evaluation.held_out import PeriodicEvaluator, evaluation_split
    from agentrl.models.load import load_policy, prompt_template_change
    from agentrl.tracking import NullTracker, Tracker, record_run
    from agentrl.train.sampler import TaskSampler
    from agentrl.train.trainer import AgentTrainer

    # before any matrix product: MKL reads its reproducibility setting at the first one
    if cfg.rollout.turns == "ready" and (varies := batch_invariant_blas()) is not None:
        raise UserError(f"rollout.turns=ready needs rows that do not depend on their batch, and {varies}")
    set_seed(cfg.seed)
    if cfg.hardware.device == "cpu":
        # the ranks on this machine share its cores (every rank of hardware=cpu_ddp)
        threads = set_torch_threads(cfg.hardware.num_processes // cfg.hardware.num_machines)
        if main_rank:
            log.info(threads)
        # the ranks of one run start together and would see each other as other work
        if cfg.hardware.num_processes == 1 and (crowded := crowded_line()) is not None:
            log.warning(crowded)
    checkpoint = resume_checkpoint(cfg.trainer.resume, folder)
    if checkpoint is not None and main_rank:
        step = truncate_metrics(folder, checkpoint)
        print(f"resuming from {checkpoint} (iteration {step})")
    if main_rank:
        record_run(folder, cfg)
    suite = make_suite(cfg.env)
    evaluation_split(cfg.eval, suite)  # a wrong split fails now, not after the model is built
    if main_rank and (change := prompt_template_change(cfg.model, cfg.env)):
        log.warning(change)
    model, tokenizer = load_policy(cfg.model, cfg.env, cfg.hardware)
    sampler = TaskSampler(suite, "train", cfg.seed, pool_size=cfg.trainer.task_pool)
    pool = make_pool(suite.make_env, cfg.env.num_workers, cfg.env.step_timeout_s)  # shared by training and eval
    evaluator = PeriodicEvaluator(cfg, suite, tokenizer, pool)
    sweep_group = Path(hydra_cfg.sweep.dir).name if hydra_cfg.mode.name == "MULTIRUN" else None
    tracker = (
        Tracker(folder, cfg, cfg.trainer.iterations, group=sweep_group, job_name=folder.name)
        if main_rank
        else NullTracker()
    )
    trainer = AgentTrainer(
        model=model,
        tokenizer=tokenizer,
        cfg=cfg,
        suite=suite,
        pool=pool,
        sampler=sampler,
        tracker=tracker,
        evaluator=evaluator,
        output_dir=folder / CHECKPOINTS,
        stop=request,
        resume_command=command,
    )
    stop = stopping.StopCallback(trainer, request)
    trainer.add_callback(stop)
    return Run(cfg, folder, main_rank, command, request, checkpoint, trainer, stop, closing=[tracker, pool])


def train(run: Run) -> None:
    trainer, request = run.trainer, run.request
    try:
        if run.checkpoint is None:
            trainer.filter_tasks()  # ARPO's optional task selection; a no-op otherwise
        else:
            trainer.load_agentrl_state(run.checkpoint)
        if request.requested:  # a signal during the setup: there is no iteration to finish
            raise Stopped(
                stopping.before_start_line(request.signum, run.resume_command), stopping.exit_code(request.signum)
            )
        trainer.train(resume_from_checkpoint=str(run.checkpoint) if run.checkpoint is not None else None)
    except stopping.IterationAbandoned as stopped:  # a stop during a rollout: the checkpoint before it is on disk
        run.abandoned = stopped
    finally:
        trainer.close_rollout_worker()  # rollout.max_staleness >= 1: its thread and environment pool
        for part in run.closing:
            part.close()


def finish(run: Run) -> float:
    """The stop line of a stopped run (raised as `Stopped`), or the final held-out success of a finished one."""
    if run.stop.stopped_at is not None or run.abandoned is not None:
        _report_stop(run)
        return float("nan")  # a rank of several: the launching process reports the stop
    success = run.trainer.last_eval.get("eval/success", float("nan"))
    if not run.main_rank:
        return success
    if distributed.is_rank_process():
        distributed.write_result(run.folder, success)  # for the process that launched the ranks
    log.info("finished: held-out success %.3f; run folder %s", success, run.folder)
    curves = plot_run(run.folder)
    print(
        f"held-out success {success:.3f} | run folder {run.folder} | checkpoint {run.folder / CHECKPOINTS / LAST}"
        + (f" | learning curves {curves}" if curves is not None else "")
    )
    return success


def _report_stop(run: Run) -> None:
    """Say where the run stopped and how to go on; in a single process, end it with the signal's exit code."""
    signum = stopping.stop_signal(run.request, run.folder)
    if run.abandoned is not None:
        completed, checkpoint = run.abandoned.completed, run.abandoned.checkpoint
    else:
        completed, checkpoint = run.stop.stopped_at, run.folder / CHECKPOINTS / checkpoint_name(run.stop.stopped_at)
    line = stopping.stop_line(
        signum, completed, run.cfg.trainer.iterations, checkpoint, run.resume_command, run.abandoned is not None
    )
    if distributed.is_rank_process():  # the launching process says it, and exits with the code
        if run.main_rank:
            distributed.write_result(
                run.folder, float("nan"), stopped={"line": line, "signal": signum, "command": run.resume_command}
            )
        return
    if run.main_rank:
        plot_run(run.folder)  # the curves so far
    run.request.hand_on_to_submitit(line)  # under submitit, its signal requeues the job (and exits)
    raise Stopped(line, stopping.exit_code(signum))


def _stopped_at_once(signum: int, folder: Path, command: str) -> str:
    """`stopping.at_once_line` with this run's last complete checkpoint."""
    last = folder / CHECKPOINTS / LAST
    return stopping.at_once_line(signum, last.resolve() if last.exists() else None, command)


def truncate_metrics(folder: Path, checkpoint: Path) -> int:
    """Drop the metrics of iterations after the checkpoint (a killed run logged them; the resumed run redoes them)."""
    step = saved_iteration(checkpoint)
    metrics_log.truncate(folder, step)
    return step
