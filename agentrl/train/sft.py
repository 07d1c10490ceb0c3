"""`agentrl sft`: behaviour cloning from an environment's expert, for any model.

setup -> demonstrations -> evaluate before -> fine-tune -> evaluate after -> save:

1. the environment's expert (its suite's `expert_plan`, docs/environments.md) plays `sft.episodes` train tasks
   through the collector, so each prompt is built by RL's template and history window (rollout/demonstrations.py);
   every turn of a won episode is one (prompt, `<action>X</action>`) pair. On the tool route (env=tools) the
   expert plays again once the model is loaded, in its tokens: each pair is the ids a rollout would write (the
   conversation so far in the chat template with tools; the reply's tool call and end-of-turn id);
2. held-out success before and after, by training's own evaluator: the tasks, sampling and seed of
   `agentrl eval` (eval.*);
3. TRL's SFTTrainer on the action tokens only (agentrl/models/fine_tune.py, also the tiny model's warm-up);
4. a plain model folder (a LoRA adapter merged in) that `agentrl train model.path=...` starts from, with the
   run's config beside it, so that `agentrl eval <folder>` evaluates it on the same environment and protocol.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from agentrl.envs.base import within_split
from agentrl.errors import UserError
from agentrl.rollout.dialects import TOOLS

MODEL_FOLDER = "model"  # <run folder>/model unless sft.output names one
RESULTS = "sft.json"  # <run folder>/sft.json: the pairs, the losses, held-out metrics before and after


def run_sft(cfg: Any) -> float:
    """One `agentrl sft` job; returns held-out success after fine-tuning (a sweep's objective)."""
    from hydra.core.hydra_config import HydraConfig
    from transformers.utils import logging as hf_logging

    from agentrl.envs.registry import make_suite
    from agentrl.evaluation.held_out import evaluation_split
    from agentrl.models.load import load_policy
    from agentrl.tracking import record_run

    hf_logging.disable_progress_bar()
    check_sft(cfg)
    folder = Path(HydraConfig.get().runtime.output_dir)
    out = Path(cfg.sft.output).expanduser() if cfg.sft.output else folder / MODEL_FOLDER
    _check_output(out)
    suite = make_suite(cfg.env, faults=False)  # the expert plays clean games, whatever a run would inject
    if cfg.sft.episodes:
        require_expert(suite, cfg.env.name)
    evaluation_split(cfg.eval, suite)  # a wrong split fails now, not after the demonstrations
    record_run(folder, cfg)
    pairs, expert = expert_demonstrations(suite, cfg)  # first: an expert that wins nothing fails before a model loads
    random_pairs = random_demonstrations(suite, cfg)
    model, tokenizer = load_policy(cfg.model, cfg.env, cfg.hardware)
    if pairs and getattr(suite, "reply_format", None) == TOOLS:  # the tool route trains on ids, as it samples them
        pairs = tool_expert_pairs(suite, cfg, tokenizer)
    metrics = {"pairs": len(pairs) + len(random_pairs), "random_pairs": len(random_pairs), **expert}
    pairs += random_pairs
    held_out = _evaluator(cfg, suite, tokenizer)
    before = held_out(model) if cfg.sft.eval_before else {}
    model, losses = _fine_tune(cfg, model, tokenizer, pairs)
    after = held_out(model)
    _save(model, tokenizer, cfg, out)
    results = {**metrics, "losses": losses, "before": before, "after": after, "model": str(out)}
    (folder / RESULTS).write_text(json.dumps(results, indent=2))
    _print_summary(results)
    return after.get("eval/success", 0.0)


def check_sft(cfg: Any) -> None:
    """What `agentrl sft` cannot do, refused before any work."""
    if cfg.sft.episodes + cfg.sft.random_episodes == 0:
        raise UserError("sft.episodes and sft.random_episodes are both 0: there is nothing to train on")
    if cfg.hardware.num_processes != 1:
        raise UserError(
            f"agentrl sft runs in one process; hardware.num_processes={cfg.hardware.num_processes} is for "
            "agentrl train (use hardware=cpu or hardware=gpu)"
        )
    if cfg.rollout.backend != "hf":
        raise UserError(
            "agentrl sft evaluates with Hugging Face generate; rollout.backend=vllm has no effect here (drop it)"
        )


def require_expert(suite, env_name: str) -> None:
    from agentrl.envs.base import has_expert

    if not has_expert(suite):
        raise UserError(
            f"env={env_name} has no expert for agentrl sft: its task suite defines no expert_plan(task) "
            "(env=gym: the environment object has no expert_plan() method; docs/environments.md, 'Experts')"
        )


def expert_demonstrations(suite, cfg: Any) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """The expert's (prompt, reply) pairs on `sft.episodes` train tasks, and how the expert did."""
    from agentrl.rollout.demonstrations import ExpertPolicy, play, won_pairs

    if not cfg.sft.episodes:
        return [], {"expert_episodes": 0, "expert_success": 0.0}
    tasks = [suite.task("train", within_split(suite, "train", cfg.sft.first_task + i)) for i in range(cfg.sft.episodes)]
    batch = play(suite, cfg.env, ExpertPolicy(suite), tasks, "sft: the expert plays")
    pairs = won_pairs(batch)
    won = sum(e.won for e in batch.episodes)
    if not pairs:
        raise UserError(
            f"the expert of env={cfg.env.name} won none of its {len(tasks)} episodes, so there is nothing to "
            f"clone; check env.max_steps (the expert's plans must fit in it) and the environment's expert_plan"
        )
    return pairs, {"expert_episodes": len(tasks), "expert_success": won / len(tasks)}


def tool_expert_pairs(suite, cfg: Any, tokenizer) -> list[tuple[list[int], list[int]]]:
    """On the tool route (env=tools), the expert's episodes of `expert_demonstrations` played again with the model's
    tokenizer: each turn's (ids, completion mask) as a rollout writes them (rollout/demonstrations.py,
    `play_with_ids`), the prompt the conversation so far in the model's chat template with its tools, never
    re-rendered. A conversation past rollout.max_prompt_tokens ends unplayed, as in training, and is not won."""
    from agentrl.rollout.demonstrations import ExpertPolicy, play_with_ids, won_id_pairs

    tasks = [suite.task("train", within_split(suite, "train", cfg.sft.first_task + i)) for i in range(cfg.sft.episodes)]
    doing = "sft: the expert plays in the model's tokens"
    batch = play_with_ids(suite, cfg.env, ExpertPolicy(suite), tasks, doing, tokenizer, cfg.rollout.max_prompt_tokens)
    pairs = won_id_pairs(batch)
    if not pairs:
        raise UserError(
            f"the expert's conversations on env={cfg.env.name} all pass rollout.max_prompt_tokens="
            f"{cfg.rollout.max_prompt_tokens} in this model's tokens: raise it"
        )
    return pairs


def random_demonstrations(suite, cfg: Any) -> list[tuple[str, str]]:
    """Every turn of `sft.random_episodes` episodes of a uniformly random admissible policy, on the train tasks
    after the expert's: the tiny model's warm-up data, here mixed into a real model's clone of the expert."""
    from agentrl.rollout.demonstrations import play
    from agentrl.rollout.policies import RandomPolicy

    if not cfg.sft.random_episodes:
        return []
    first = cfg.sft.first_task + cfg.sft.episodes
    tasks = [suite.task("train", within_split(suite, "train", first + i)) for i in range(cfg.sft.random_episodes)]
    batch = play(
        suite, cfg.env, RandomPolicy.for_suite(suite, cfg.seed), tasks, "sft: a random admissible policy plays"
    )
    return list(zip(batch.prompt, batch.completion))


def _evaluator(cfg: Any, suite, tokenizer):
    """Held-out metrics of a model: training's evaluator, the protocol of `agentrl eval`, with a progress line."""
    from agentrl.evaluation.held_out import PeriodicEvaluator
    from agentrl.progress import Phase

    evaluator = PeriodicEvaluator(cfg, suite, tokenizer)
    episodes = len(evaluator.tasks) * cfg.eval.episodes_per_task
    limit = cfg.env.max_steps or suite.max_steps

    def held_out(model) -> dict[str, float]:
        with Phase(f"sft: evaluating ({episodes} held-out episodes in lockstep), turn", limit) as phase:
            return evaluator(model, on_turn=phase.reach)

    return held_out


def _fine_tune(cfg: Any, model, tokenizer, pairs):
    from agentrl.models.fine_tune import Schedule, fine_tune
    from agentrl.models.lora import peft_config

    s = cfg.sft
    schedule = Schedule(
        steps=math.ceil(len(pairs) / s.batch_size) * s.epochs,
        batch_size=s.batch_size,
        learning_rate=s.learning_rate,
        seed=cfg.seed,
        max_prompt_tokens=cfg.rollout.max_prompt_tokens,
        weight_decay=s.weight_decay,
        max_grad_norm=s.max_grad_norm,
    )
    return fine_tune(
        model,
        tokenizer,
        pairs,
        schedule,
        device=cfg.hardware.device,
        precision=cfg.hardware.precision,
        peft_config=peft_config(cfg.model.lora),
        doing="sft: fine-tuning on the expert's actions" + (" and random play" if cfg.sft.random_episodes else ""),
    )


def _check_output(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"sft.output={out} exists and is not an empty folder; name a new one")


def _save(model, tokenizer, cfg: Any, out: Path) -> None:
    """Plain weights and tokenizer, and the run's config (`agentrl eval` reads its env and eval from it)."""
    from omegaconf import OmegaConf

    from agentrl.checkpoints import TRAINING_CONFIG

    try:
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        (out / TRAINING_CONFIG).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    except OSError as err:
        raise UserError(f"cannot write the model to {out}: {err.strerror}") from None


def _print_summary(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    before, after = results["before"], results["after"]
    console = Console()
    console.print(
        f"expert: won {results['expert_success']:.3f} of {results['expert_episodes']} train episodes, "
        f"{results['pairs'] - results['random_pairs']} (prompt, action) pairs"
        + (f"; random play: {results['random_pairs']} pairs" if results["random_pairs"] else "")
    )
    table = Table(title="held-out results")
    table.add_column("metric")
    table.add_column("before sft", justify="right")
    table.add_column("after sft", justify="right")
    for key in sorted(k for k in after if k.count("/") == 1):
        shown = f"{before[key]:.3f}" if key in before else "-"
        table.add_row(key, shown, f"{after[key]:.3f}")
    console.print(table)
    console.print(f"model: {results['model']}  (agentrl train model.path={results['model']})", soft_wrap=True)
