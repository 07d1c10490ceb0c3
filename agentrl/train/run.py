"""`agentrl train`: wire the pieces from the config, in the order a reader expects.

setup (run record, environment, model, sampler, tracker, evaluator) -> train -> final
held-out success (returned, so that Hydra sweepers can optimise it) -> cleanup. A signal stops the
run after the iteration in progress, with a checkpoint (agentrl/train/stopping.py).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from agentrl import metrics_log
from agentrl.checkpoints import CHECKPOINTS, LAST, checkpoint_name, resume_checkpoint, saved_iteration
from agentrl.errors import Stopped
from agentrl.plots import plot_run

log = logging.getLogger(__name__)


def train(cfg: Any) -> float:
    os.environ.setdefault("WANDB_SILENT", "true")
    from hydra.core.hydra_config import HydraConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress bar is the one to watch

    from agentrl.models import resolve_model_source
    from agentrl.train import distributed, stopping

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    _check_writable(run_dir)
    overrides = list(hydra_cfg.overrides.task)
    if distributed.needs_launch(cfg.hardware):
        resolve_model_source(cfg.model, cfg.env)  # build the tiny model once here, not in every rank at the same time
        return distributed.launch_ranks(cfg, overrides, run_dir)
    main_rank = int(os.environ.get("RANK", "0")) == 0
    if distributed.is_rank_process():
        stopping.watch_launcher()
    else:
        (run_dir / stopping.STOP_FILE).unlink(missing_ok=True)
    command = stopping.resume_command(overrides, run_dir)
    request = stopping.StopRequest(
        lambda signum: _stopped_at_once(signum, run_dir, command),
        quiet=not main_rank,
        stop_file=run_dir / stopping.STOP_FILE,
    )
    request.install()
    try:
        return _train(cfg, run_dir, main_rank, request, command)
    finally:
        request.uninstall()


def _train(cfg: Any, run_dir: Path, main_rank: bool, request: Any, command: str) -> float:
    from hydra.core.hydra_config import HydraConfig
    from transformers import set_seed

    from agentrl.envs.registry import make_suite
    from agentrl.envs.workers import make_pool
    from agentrl.evaluate import PeriodicEvaluator, evaluation_split
    from agentrl.models import load_policy
    from agentrl.tracking import NullTracker, Tracker, record_run
    from agentrl.train import distributed, stopping
    from agentrl.train.sampler import TaskSampler
    from agentrl.train.trainer import AgentTrainer

    hydra_cfg = HydraConfig.get()
    set_seed(cfg.seed)

    # ---- setup
    checkpoint = resume_checkpoint(cfg.trainer.resume, run_dir)
    if checkpoint is not None and main_rank:
        step = truncate_metrics(run_dir, checkpoint)
        print(f"resuming from {checkpoint} (iteration {step})")
    if main_rank:
        record_run(run_dir, cfg)
    suite = make_suite(cfg.env)
    evaluation_split(cfg.eval, suite)  # a wrong split fails now, not after the model is built
    model, tokenizer = load_policy(cfg.model, cfg.env, cfg.hardware)
    sampler = TaskSampler(suite, "train", cfg.seed, pool_size=cfg.trainer.task_pool)
    pool = make_pool(suite.make_env, cfg.env.num_workers, cfg.env.step_timeout_s)  # shared by training and eval
    evaluator = PeriodicEvaluator(cfg, suite, tokenizer, pool)
    sweep_group = Path(hydra_cfg.sweep.dir).name if hydra_cfg.mode.name == "MULTIRUN" else None
    tracker = (
        Tracker(run_dir, cfg, cfg.trainer.iterations, group=sweep_group, job_name=run_dir.name)
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
        output_dir=run_dir / CHECKPOINTS,
        stop=request,
        resume_command=command,
    )
    stop = stopping.StopCallback(trainer, request)
    trainer.add_callback(stop)
    abandoned = None

    # ---- train
    try:
        if checkpoint is None:
            trainer.filter_tasks()  # ARPO's optional task selection; a no-op otherwise
        else:
            trainer.load_agentrl_state(checkpoint)
        if request.requested:  # a signal during the setup: there is no iteration to finish
            raise Stopped(
                f"stopped on {stopping.signal_name(request.signum)} before the first iteration; start again: {command}",
                stopping.exit_code(request.signum),
            )
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
    except stopping.IterationAbandoned as stopped:  # a stop during a rollout: the checkpoint before it is on disk
        abandoned = stopped
    finally:
        tracker.close()
        pool.close()

    # ---- a stop on a signal: the checkpoint is written; say where, and how to go on
    if stop.stopped_at is not None or abandoned is not None:
        signum = stopping.stop_signal(request, run_dir)
        if abandoned is not None:
            completed, folder = abandoned.completed, abandoned.checkpoint
        else:
            completed, folder = stop.stopped_at, run_dir / CHECKPOINTS / checkpoint_name(stop.stopped_at)
        line = stopping.stop_line(
            signum, completed, cfg.trainer.iterations, folder, command, abandoned=abandoned is not None
        )
        if distributed.is_rank_process():  # the launching process says it, and exits with the code
            if main_rank:
                distributed.write_result(run_dir, float("nan"), stopped={"line": line, "signal": signum})
            return float("nan")
        if main_rank:
            plot_run(run_dir)  # the curves so far
        request.uninstall()
        request.hand_on_to_submitit(line)  # under submitit, its signal requeues the job (and exits)
        raise Stopped(line, stopping.exit_code(signum))

    # ---- report
    success = trainer.last_eval.get("eval/success", float("nan"))
    if not main_rank:
        return success
    if distributed.is_rank_process():
        distributed.write_result(run_dir, success)  # for the process that launched the ranks
    log.info("finished: held-out success %.3f; run folder %s", success, run_dir)
    curves = plot_run(run_dir)
    print(
        f"held-out success {success:.3f} | run folder {run_dir} | checkpoint {run_dir / CHECKPOINTS / LAST}"
        + (f" | learning curves {curves}" if curves is not None else "")
    )
    return success


def _stopped_at_once(signum: int, run_dir: Path, command: str) -> str:
    """The line a second Ctrl-C prints as it ends the process: the last complete checkpoint is intact."""
    from agentrl.train.stopping import signal_name

    last = run_dir / CHECKPOINTS / LAST
    where = f"the last complete checkpoint is {last.resolve()}" if last.exists() else "no checkpoint was written yet"
    return f"stopped at once on a second {signal_name(signum)}; {where}; resume: {command}"


def truncate_metrics(run_dir: Path, checkpoint: Path) -> int:
    """Drop the metrics of iterations after the checkpoint (a killed run logged them; the resumed run redoes them)."""
    step = saved_iteration(checkpoint)
    metrics_log.truncate(run_dir, step)
    return step


def _check_writable(run_dir: Path) -> None:
    from agentrl.errors import UserError

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-test-{os.getpid()}"  # one per process: ranks check at the same time
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UserError(f"the output folder {run_dir} cannot be written: {err.strerror}") from None
