"""Held-out evaluation: the training collector with evaluation sampling.

Reports, overall and per task type: success, mean return, mean episode length,
invalid-action rate, and pass@k when k > 1 episodes are run per task. Used both
by the trainer (periodic `eval/*` metrics) and by `agentrl eval`, which also
writes eval.json and trajectories.jsonl and prints the protocol it used.
"""

from __future__ import annotations

import dataclasses
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from agentrl.checkpoints import CHECKPOINTS, LAST, MODEL_CONFIGS
from agentrl.errors import UserError
from agentrl.evaluation.results import EpisodeLog, print_protocol, print_table, write_results
from agentrl.models.load import load_tokenizer
from agentrl.models.lora import training_config
from agentrl.rollout.batch import StepBatch, summarize
from agentrl.rollout.collector import Policy, PromptSpec, collect
from agentrl.run_folder import as_container


def evaluation_split(eval_cfg: Any, suite) -> str:
    """The split to evaluate on (eval.split, else the environment's held-out split); checked before any model is built."""
    return _check_split(suite, eval_cfg.split or suite.eval_split)


def _check_split(suite, split: str) -> str:
    if split not in suite.splits:
        raise UserError(
            f"eval.split='{split}' does not exist for env={suite.name}; available: {', '.join(suite.splits)}"
        )
    return split


def evaluation_tasks(suite, split: str, num_tasks: int) -> list:
    """The first `num_tasks` tasks of a split: the same set for every run, so runs compare."""
    _check_split(suite, split)
    size = suite.split_size(split)
    count = num_tasks if size is None else min(num_tasks, size)
    return [suite.task(split, i) for i in range(count)]


def eval_sampling(eval_cfg: Any, rollout_cfg: Any):
    """Evaluation sampling: the eval temperature (or greedy), the rollout's length and prompt budget."""
    from agentrl.rollout.policies import SamplingSpec

    return SamplingSpec(
        eval_cfg.temperature, 1.0, rollout_cfg.max_new_tokens, rollout_cfg.max_prompt_tokens, eval_cfg.greedy
    )


class PeriodicEvaluator:
    """Called by the trainer with its model: held-out success at evaluation sampling, RNG kept apart."""

    def __init__(self, cfg: Any, suite, tokenizer, pool=None):
        self.cfg, self.suite, self.tokenizer, self.pool = cfg, suite, tokenizer, pool
        self.tasks = evaluation_tasks(suite, evaluation_split(cfg.eval, suite), cfg.eval.num_tasks)
        self.sampling = eval_sampling(cfg.eval, cfg.rollout)
        self.prompt = PromptSpec(cfg.env.prompt_template, cfg.env.history_length)

    def __call__(self, model, rank: int = 0, ranks: int = 1, gather=None, on_turn=None) -> dict[str, float]:
        """Held-out metrics. With several ranks each evaluates its share of the tasks, and `gather`
        (a collective) brings every rank's episodes together, so that all ranks return the same numbers.
        `on_turn(turn, limit)` follows the rollout (a progress line)."""
        import torch

        from agentrl.ranks import rank_share
        from agentrl.rollout.policies import HFPolicy

        tasks = rank_share(self.tasks, rank, ranks)
        device = next(model.parameters()).device
        # A forked RNG: evaluating must not change the training run's random stream.
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(self.cfg.eval.seed + rank)
            policy = HFPolicy(model, self.tokenizer, self.sampling)
            batch = collect(
                self.suite,
                tasks,
                self.cfg.eval.episodes_per_task,
                policy,
                self.prompt,
                max_steps=self.cfg.env.max_steps,
                pool=self.pool,
                on_turn=on_turn,
            )
        episodes = batch.episodes if gather is None else gather(batch.episodes)
        return summarize(StepBatch(episodes=episodes), "eval")


# --------------------------------------------------------------------------- agentrl eval


def resolve_checkpoint(path: str) -> Path:
    """A checkpoint folder, or a run folder whose checkpoints/last is taken."""
    p = Path(path).expanduser()
    for candidate in (p, p / CHECKPOINTS / LAST, p / LAST):
        if any((candidate / name).is_file() for name in MODEL_CONFIGS):  # full weights or a LoRA adapter
            return candidate.resolve()
    if not p.exists():
        raise UserError(f"checkpoint {path} does not exist")
    raise UserError(
        f"{path} holds no checkpoint (expected a model folder with config.json or a LoRA adapter "
        "with adapter_config.json, or a run folder with checkpoints/last)"
    )


def evaluate_from_config(cfg: Any) -> float:
    """`agentrl eval`: load the checkpoint (or a baseline), run the split, print and save the results."""
    import torch
    from hydra.core.hydra_config import HydraConfig
    from transformers.utils import logging as hf_logging

    from agentrl.envs.registry import make_suite
    from agentrl.envs.workers import make_pool
    from agentrl.progress import Phase
    from agentrl.rollout.policies import RandomPolicy

    hf_logging.disable_progress_bar()
    checkpoint = trained = None
    recipe = _recipe(cfg.recipe_config) if cfg.recipe_config else None
    zero_shot = recipe is not None and recipe.get("model") is not None  # model=NAME on the command line
    if zero_shot and (cfg.checkpoint or cfg.policy == "random"):
        raise UserError(
            "model=... evaluates that model zero-shot; a checkpoint carries its own model and --random plays none: "
            "give one of the three"
        )
    if cfg.policy == "checkpoint" and not zero_shot:
        if not cfg.checkpoint:
            raise UserError(
                "give a checkpoint (agentrl eval outputs/<run>), a model (agentrl eval model=NAME) or --random "
                "for the baseline"
            )
        checkpoint = resolve_checkpoint(cfg.checkpoint)
        trained = training_config(checkpoint)
    # whose env and eval settings the evaluation takes: a recipe or model named on the command line, else the
    # checkpoint's run
    setting = recipe if recipe is not None else trained
    env_cfg = _env_of_checkpoint(setting, cfg)
    eval_cfg, sources = eval_of_run(
        cfg.eval,
        setting.get("eval") if setting is not None else None,
        _given("eval"),
        "composed" if zero_shot else "recipe" if cfg.recipe_config else "run",
    )
    suite = make_suite(env_cfg)
    split = evaluation_split(eval_cfg, suite)
    tasks = evaluation_tasks(suite, split, eval_cfg.num_tasks)
    scratch = ExitStack()  # a vLLM engine, and a LoRA checkpoint merged for it, live until the evaluation is over
    if checkpoint is not None:
        # generation length and prompt budget follow training (tiny: 16 tokens)
        sampling = eval_sampling(eval_cfg, trained.rollout if trained is not None else cfg.rollout)
        policy = _checkpoint_policy(cfg, checkpoint, trained, sampling, scratch, eval_cfg.seed)
        policy_name = str(checkpoint)
    elif zero_shot:  # as `agentrl train model=NAME` starts: its generation length and prompt budget
        sampling = eval_sampling(eval_cfg, recipe.rollout)
        policy = _model_policy(cfg, recipe.model, env_cfg, sampling, scratch, eval_cfg.seed)
        policy_name = f"model={recipe.model.name}, zero-shot"
    else:
        policy, policy_name = RandomPolicy.for_suite(suite, eval_cfg.seed), "random admissible policy"

    out_dir = Path(cfg.output) if cfg.output else Path(HydraConfig.get().runtime.output_dir)
    protocol = {
        "policy": policy_name,
        "backend": cfg.rollout.backend if checkpoint is not None or zero_shot else None,  # who generates
        "env": as_container(env_cfg),
        "split": split,
        "tasks": len(tasks),
        "episodes_per_task": eval_cfg.episodes_per_task,
        "seed": eval_cfg.seed,
        "temperature": "greedy" if eval_cfg.greedy else eval_cfg.temperature,
        "sources": sources,  # eval.<key>: "run" (the training run's eval), "command line" or "default"
    }
    print_protocol(protocol)
    prompt = PromptSpec(env_cfg.prompt_template, env_cfg.history_length)
    episodes = len(tasks) * eval_cfg.episodes_per_task
    with (
        scratch,
        EpisodeLog(out_dir) as ended,
        make_pool(suite.make_env, env_cfg.num_workers, env_cfg.step_timeout_s) as pool,
        Phase(f"evaluating ({episodes} episodes in lockstep), turn", env_cfg.max_steps or suite.max_steps) as phase,
    ):
        torch.manual_seed(eval_cfg.seed)  # as training's evaluator seeds it: loading the model draws nothing then
        batch = collect(
            suite,
            tasks,
            eval_cfg.episodes_per_task,
            policy,
            prompt,
            max_steps=env_cfg.max_steps,
            pool=pool,
            keep_transcripts=True,
            on_turn=phase.reach,
            on_episode_end=ended.write,
        )
    metrics = summarize(batch, "eval")
    print_table(metrics)
    write_results(out_dir, protocol, metrics, batch)
    return metrics.get("eval/success", 0.0)


def _checkpoint_policy(
    cfg: Any, checkpoint: Path, trained: Any | None, sampling, scratch: ExitStack, seed: int
) -> Policy:
    """The policy of a checkpoint (full weights, or a LoRA adapter on its base) on rollout.backend."""
    from agentrl.models import lora

    if cfg.rollout.backend == "vllm":
        from agentrl.rollout.vllm_policy import make_eval_policy

        # vLLM loads plain weights: a LoRA adapter is merged first (or its merge_on_save copy is used)
        source = lora.servable_model(checkpoint, scratch.enter_context(tempfile.TemporaryDirectory()))
        from agentrl.rollout.vllm_engine import engine_dtype

        dtype = engine_dtype(cfg.hardware.precision)
        policy = make_eval_policy(source, load_tokenizer(source), sampling, cfg.rollout.vllm, seed=seed, dtype=dtype)
        scratch.callback(policy.close)  # the engine stops with the evaluation, before its merged weights go
        return policy
    from omegaconf import OmegaConf

    from agentrl.rollout.policies import HFPolicy

    # the attention kernel the run trained with (a config from before the key has none: transformers' default)
    attention = OmegaConf.select(trained, "model.attn_implementation") if trained is not None else None
    model, tokenizer = lora.load_checkpoint(
        checkpoint, cfg.hardware.precision, cfg.hardware.device, trained, attention=attention
    )
    return HFPolicy(model, tokenizer, sampling)


def _model_policy(cfg: Any, model_cfg: Any, env_cfg: Any, sampling, scratch: ExitStack, seed: int) -> Policy:
    """The policy of a model= choice as training loads it (the tiny model's build, a registry model's conversion,
    model.path or the hub id), on rollout.backend; no LoRA adapter (training would add a fresh one: zero-shot,
    it is the base model)."""
    from agentrl.models.load import load_policy, resolve_model_source

    if cfg.rollout.backend == "vllm":
        from agentrl.rollout.vllm_engine import engine_dtype
        from agentrl.rollout.vllm_policy import make_eval_policy

        source = resolve_model_source(model_cfg, env_cfg)
        dtype = engine_dtype(cfg.hardware.precision)
        policy = make_eval_policy(source, load_tokenizer(source), sampling, cfg.rollout.vllm, seed=seed, dtype=dtype)
        scratch.callback(policy.close)
        return policy
    from agentrl.rollout.policies import HFPolicy

    model, tokenizer = load_policy(model_cfg, env_cfg, cfg.hardware)
    return HFPolicy(model, tokenizer, sampling)


def _recipe(path: str) -> Any:
    """The env and eval sections of a recipe, as agentrl/cli/eval_recipe.py wrote them."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.load(path)
    except Exception as err:  # YAML errors of every kind
        raise UserError(f"cannot read the recipe's settings {path}: {type(err).__name__}") from None


def _env_of_checkpoint(trained: Any | None, cfg: Any) -> Any:
    """The training run's env config, unless env=... or env.* was given on the command line."""

    overridden = any(k == "env" or k.startswith("env.") for k in _command_line_keys())
    return cfg.env if overridden or trained is None else trained.env


def _command_line_keys() -> list[str]:
    """The keys the command line set (`+eval.num_tasks=100` gives "eval.num_tasks", `env=alfworld` "env")."""
    from hydra.core.hydra_config import HydraConfig

    return [o.lstrip("+~").split("=", 1)[0] for o in HydraConfig.get().overrides.task]


def _given(section: str) -> set[str]:
    """The keys of `section` set on the command line (`eval.num_tasks=100` gives "num_tasks")."""
    return {k.split(".", 1)[1].split(".", 1)[0] for k in _command_line_keys() if k.startswith(section + ".")}


def eval_of_run(
    eval_cfg: Any, run_eval: Any | None, given: set[str], source: str = "run"
) -> tuple[Any, dict[str, str]]:
    """The evaluation settings `agentrl eval` uses, and where each came from.

    The training run's own `eval` (split, tasks, episodes per task, temperature or greedy, seed) wins over
    conf/eval.yaml's defaults, so that a checkpoint scores under `agentrl eval` what it scored in training's
    final evaluation; a key given on the command line wins over both. Without a run (a baseline, or a plain
    model folder) the defaults stand. `source` names where `run_eval` came from ("run", "recipe" for a recipe
    named on the command line, "composed" for the training config of a model named there)."""
    from_run, sources = {}, {}
    for spec in dataclasses.fields(eval_cfg):
        key = spec.name
        if key in given:
            sources[key] = "command line"
        elif run_eval is not None and key in run_eval:
            from_run[key], sources[key] = run_eval[key], source
        else:
            sources[key] = "default"
    return dataclasses.replace(eval_cfg, **from_run), sources
