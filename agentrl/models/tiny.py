"""The embedded tiny model: built locally on first use, warmed up, cached.

Recipe (docs/architecture.md, "The embedded default"):
1. roll out a random admissible policy on the environment's train tasks and keep
   each turn's prompt and its well-formed reply `<action>X</action>`;
2. train a byte-level BPE tokenizer on that text (chat markers are special tokens,
   the action/think tags are plain added tokens so that decoding keeps them);
3. build a small Qwen2-architecture model from a config, random weights;
4. warm it up with supervised steps on those (prompt, random admissible reply)
   pairs, so that it starts as a weak agent that emits valid actions rather than
   as noise. RL must do the rest. The steps are `agentrl sft`'s (agentrl/models/fine_tune.py,
   TRL's SFTTrainer, the loss on the reply only): one way to warm-start any model.

The cache key covers every build setting, the environment config, and a hash of
the source that shapes the demonstration text (the environment's own modules and
agentrl/rollout) and
of the engine versions, so a different environment or template, or a change to
an environment's code, builds a new model instead of reusing a stale one. (An
earlier key of config values alone reused a model warmed up on an older version
of the household text.) The folder is written under a temporary name and renamed
when complete.

A build differs from one CPU to the next (floating-point order), and RL's outcome
with it (docs/architecture.md, "How much the build decides"). So agentrl ships one
build of household's default (agentrl/models/shipped/household, made by
scripts/ship_tiny_build.py): where the settings and the environment's
demonstration text are the ones it was built from, it is loaded as it is, and
nothing is built. `model.tiny.shipped=false` builds on this machine instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from agentrl.cache import cache_root, make_cache_folder
from agentrl.models.tiny_tokenizer import build_tokenizer, tokenizer_text
from agentrl.run_folder import as_container

log = logging.getLogger(__name__)

# bump when the recipe changes, so old caches are not reused (4: the warm-up runs on SFTTrainer; 5: fresh demonstrations)
BUILD_VERSION = 5
# Turns of demonstrations unless demo_turns says: on an engine (ALFWorld, ScienceWorld, plug-ins: tens of ms a step)
# this many; in process at least this many (the tokenizer's text), and one for every row the warm-up trains on.
DEMO_TURNS = 4000
# Pairs whose mean length in tokens sizes the warm-up (warmup_step_count).
TOKEN_SAMPLE = 512
# Turns the build's check plays (fewer where the demonstrations are fewer: a tenth of them).
CHECK_TURNS = 400
# The builds that ship with agentrl, one folder per environment, each with the record of what it was built from.
SHIPPED = Path(__file__).resolve().parent / "shipped"
SHIPPED_RECORD = "shipped.json"
# Turns of demonstrations whose text fingerprints a build's environment: enough to cover every kind of prompt.
FINGERPRINT_TURNS = 200
# The band of the build's check where RL from a build of household's default has learned (docs/architecture.md,
# "The warm start"): its choice spread over the admissible actions (normalised entropy) and its probability on them.
# Builds below it have not learned in RL (model.tiny.seed=2 on an AMD EPYC: 0.73 and 0.34, held-out 0.00 after
# 50 iterations); inside it RL still differs from build to build.
EXPLORING_START = {"admissible_entropy": 0.78, "admissible_mass": 0.70}


# The engine packages whose versions change an environment's demonstration text.
ENGINE_PACKAGES = {
    "alfworld": ("alfworld", "textworld"),
    "scienceworld": ("scienceworld",),
    "gem": ("gem-llm", "reasoning-gym"),
}


def _source_fingerprint(env_name: str) -> str:
    """A hash of the code that produces the demonstration text (the env's own modules, agentrl/rollout)
    and of the engines' versions."""
    from agentrl.tracking import package_versions

    package = Path(__file__).resolve().parents[1]  # agentrl/, which the paths below are relative to
    envs = package / "envs"
    sources = [
        *envs.glob(f"{env_name}*.py"),
        *(envs / env_name).rglob("*.py"),
        envs / "base.py",
        *(package / "rollout").rglob("*.py"),
    ]
    digest = hashlib.sha256()
    for path in sorted(sources):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    versions = package_versions()
    # only the env's own engines: installing the alfworld extra must not rebuild household's model
    digest.update(json.dumps({k: versions.get(k) for k in ENGINE_PACKAGES.get(env_name, ())}).encode())
    return digest.hexdigest()


# How environments are run and what they pay, not what they show: these keys do not change the model that is built
# (its warm-up imitates random play, whatever the rewards).
RUNTIME_ENV_KEYS = ("num_workers", "step_timeout_s", "fault_rate", "step_latency_s", "max_fault_share", "reward")


# Where a model is kept, not what it is.
LOCATION_TINY_KEYS = ("cache_dir", "shipped")


def build_spec(tiny_cfg: Any, env_cfg: Any) -> dict:
    """The settings a build is made from: the recipe's version, the tiny model's and the environment's settings."""
    spec = {
        "version": BUILD_VERSION,
        "tiny": {k: v for k, v in as_container(tiny_cfg).items() if k not in LOCATION_TINY_KEYS},
        "env": {k: v for k, v in as_container(env_cfg).items() if k not in RUNTIME_ENV_KEYS},
    }
    return json.loads(json.dumps(spec, sort_keys=True, default=str))  # as a record on disk reads back


def _factory_fingerprint(env_cfg: Any) -> str | None:
    """A hash of the source file of a user's env.factory module (env=gym), so that a changed environment builds a
    new model; None where the config names no factory or its module is not found."""
    from agentrl.envs.gym_factory import factory_source

    factory = getattr(env_cfg, "factory", None)
    source = factory_source(factory) if isinstance(factory, str) else None
    return None if source is None else hashlib.sha256(source.read_bytes()).hexdigest()


def cache_key(tiny_cfg: Any, env_cfg: Any) -> str:
    spec = {**build_spec(tiny_cfg, env_cfg), "source": _source_fingerprint(env_cfg.name)}
    if (factory := _factory_fingerprint(env_cfg)) is not None:
        spec["factory_source"] = factory
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:12]


def text_fingerprint(tiny_cfg: Any, env_cfg: Any) -> str:
    """A hash of the first FINGERPRINT_TURNS demonstration turns (prompt and reply) as the build would play them:
    it changes where the environment's or the rollout's text changes, and not where their code only moves."""
    from agentrl.envs.registry import make_suite

    suite = make_suite(env_cfg, faults=False)
    demos = _random_play(suite, env_cfg, tiny_cfg, FINGERPRINT_TURNS, "tiny model: reading the environment's text")
    digest = hashlib.sha256()
    for prompt, completion in zip(demos.prompt, demos.completion):
        digest.update(json.dumps([prompt, completion]).encode())
    return digest.hexdigest()


def shipped_build(tiny_cfg: Any, env_cfg: Any) -> Path | None:
    """The shipped build for this config, or None: where none ships for the environment, where it was built from
    other settings, or where the environment's text has changed since (then in one warning line)."""
    folder = SHIPPED / env_cfg.name
    if not tiny_cfg.shipped or not (folder / SHIPPED_RECORD).is_file():
        return None
    record = json.loads((folder / SHIPPED_RECORD).read_text())
    if record["spec"] != build_spec(tiny_cfg, env_cfg):
        return None
    if record["text_fingerprint"] != text_fingerprint(tiny_cfg, env_cfg):
        log.warning(
            "the shipped tiny model for %s was built from other demonstration text than this version's: building "
            "one here instead (scripts/ship_tiny_build.py makes a new one to ship)",
            env_cfg.name,
        )
        return None
    return folder


def cached_build_folder(tiny_cfg: Any, env_cfg: Any) -> Path:
    """Where the build of this config is cached (it may not be there yet)."""
    return cache_root(tiny_cfg.cache_dir) / "tiny" / f"{env_cfg.name}-{cache_key(tiny_cfg, env_cfg)}"


def available_build(tiny_cfg: Any, env_cfg: Any) -> Path | None:
    """The shipped build that fits this config, else its cached build, else None (it would be built): the memory plan
    counts the build's phase where this is None."""
    shipped = shipped_build(tiny_cfg, env_cfg)
    if shipped is not None:
        return shipped
    cached = cached_build_folder(tiny_cfg, env_cfg)
    return cached if (cached / "warmup.json").is_file() else None


def ensure_tiny_model(tiny_cfg: Any, env_cfg: Any) -> Path:
    """The folder of the tiny model for this config: the shipped build where it matches, else the cached build,
    built if it is not cached yet."""
    shipped = shipped_build(tiny_cfg, env_cfg)
    if shipped is not None:
        log.info("tiny model: agentrl's shipped build (%s; model.tiny.shipped=false builds one here)", shipped)
        return shipped
    target = cached_build_folder(tiny_cfg, env_cfg)
    if (target / "warmup.json").is_file():
        return target
    make_cache_folder(target.parent)
    staging = target.parent / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    build = build_tiny_model
    if env_cfg.name == "tools":  # the tool-calling route's own build (agentrl/models/tiny_tools.py)
        from agentrl.models.tiny_tools import build_tiny_tool_model as build
    if build is build_tiny_model:  # the tool route's build says its own
        log.info(
            "building the tiny model in %s first (first use; cached afterwards): %d turns of random play, then up to "
            "%d warm-up steps; about 2 minutes on 2 cores for household, longer where an engine plays the turns",
            target,
            demonstration_turns(tiny_cfg, env_cfg.name),
            tiny_cfg.warmup_steps,
        )
    try:
        build(tiny_cfg, env_cfg, staging)
    except BaseException:  # a stop (Ctrl-C) or an error: no half-built model is left in the cache
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        staging.rename(target)
    except OSError:  # another process finished first: keep theirs
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _play(suite, env_cfg: Any, policy, split: str, first_index: int, turns: int, doing: str, tiny_cfg: Any):
    """About `turns` turns of `policy` on consecutive tasks of `split`, one episode each (episodes of
    max_steps), so that a slow engine is not played for hours. `doing` names it in the progress report. Each prompt
    keeps the text its last `tiny_cfg.max_prompt_tokens` ids can come from (rollout/prompts.py, `prompt_tail`)."""
    from agentrl.envs.base import within_split
    from agentrl.rollout.demonstrations import play
    from agentrl.rollout.prompts import CHARS_PER_TOKEN_BOUND

    episodes = max(4, -(-turns // suite.max_steps))
    tasks = [suite.task(split, within_split(suite, split, first_index + i)) for i in range(episodes)]
    return play(suite, env_cfg, policy, tasks, doing, prompt_chars=tiny_cfg.max_prompt_tokens * CHARS_PER_TOKEN_BOUND)


def _random_play(suite, env_cfg: Any, tiny_cfg: Any, turns: int, doing: str):
    """The build's demonstrations: about `turns` turns of the random admissible policy on training tasks, both
    drawn with the build's seed (the build plays them, and the shipped build's fingerprint reads their start)."""
    from agentrl.rollout.policies import RandomPolicy

    policy = RandomPolicy.for_suite(suite, tiny_cfg.seed)  # one line where no random policy can play the env
    return _play(suite, env_cfg, policy, "train", 1_000_000 + tiny_cfg.seed * 10_000, turns, doing, tiny_cfg)


def new_tiny_model(tiny_cfg: Any, tokenizer, max_positions: int):
    """A Qwen2ForCausalLM of the tiny model's shape for `tokenizer`, random weights (seeded by the caller), tied
    embeddings, generation ending at the tokenizer's end-of-turn id."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    heads = tiny_cfg.num_heads
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=tiny_cfg.hidden_size,
        intermediate_size=tiny_cfg.intermediate_size,
        num_hidden_layers=tiny_cfg.num_layers,
        num_attention_heads=heads,
        num_key_value_heads=tiny_cfg.num_kv_heads or heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_build(out_dir: Path, model, tokenizer, losses: list[float], pairs: int, started: float, **found) -> dict:
    """Save a built model and its tokenizer into `out_dir`, with the build's report (warmup.json: its size, its
    warm-up, `found` by the build's own check, its time); returns the report."""
    out_dir.mkdir(parents=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    report = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "warmup_steps": len(losses),
        "warmup_final_loss": losses[-1] if losses else None,
        "demonstration_pairs": pairs,
        **found,
        "build_seconds": round(time.time() - started, 1),
    }
    (out_dir / "warmup.json").write_text(json.dumps(report, indent=2))
    return report


def build_tiny_model(tiny_cfg: Any, env_cfg: Any, out_dir: Path) -> None:
    """Build, warm up and save the tiny model and its tokenizer into `out_dir`."""
    import torch

    from agentrl.envs.registry import make_suite

    torch.manual_seed(tiny_cfg.seed)
    started = time.time()
    suite = make_suite(env_cfg, faults=False)  # the demonstrations are clean games, whatever the run injects
    turns = demonstration_turns(tiny_cfg, env_cfg.name)
    demos = _random_play(suite, env_cfg, tiny_cfg, turns, "tiny model: playing demonstrations")
    pairs = list(zip(demos.prompt, demos.completion))  # (prompt, random admissible reply)
    tokenizer = build_tokenizer(tokenizer_text(pairs), tiny_cfg.vocab_size)
    model = new_tiny_model(tiny_cfg, tokenizer, max_positions=2048)

    model, losses = warm_up(model, tokenizer, pairs, tiny_cfg)
    validity = valid_action_rate(model, tokenizer, suite, env_cfg, tiny_cfg, min(CHECK_TURNS, max(1, turns // 10)))

    report = save_build(out_dir, model, tokenizer, losses, len(pairs), started, **validity)
    log.info("tiny model ready: %s", report)
    if (weak := weak_start(report)) is not None:
        log.warning(weak)


def weak_start(report: dict) -> str | None:
    """One line where a build's check falls below EXPLORING_START (RL from such a start may not learn), else None."""
    below = [
        f"{key} {report[key]:.2f} < {floor}" for key, floor in EXPLORING_START.items() if report.get(key, floor) < floor
    ]
    if not below:
        return None
    return (
        f"this tiny model's warm start spreads less over the admissible actions than the builds RL learned from "
        f"({', '.join(below)}): RL from it may not learn; another model.tiny.seed builds another"
    )


def demonstration_turns(tiny_cfg: Any, env_name: str) -> int:
    """Turns of random admissible play the build learns from: `demo_turns` where it is set. Else, where the
    environment plays in process, one turn for every row the warm-up trains on (and at least DEMO_TURNS), so that
    no pair is trained on twice: a pair seen a dozen times is learned with its arbitrary random reply, and the model
    no longer spreads over the admissible actions as the random policy does (docs/architecture.md, "The warm
    start"). Else, on an engine, DEMO_TURNS."""
    from agentrl.rollout.demonstrations import plays_in_process

    if tiny_cfg.demo_turns is not None:
        return tiny_cfg.demo_turns
    if plays_in_process(env_name):
        return max(DEMO_TURNS, tiny_cfg.warmup_steps * tiny_cfg.warmup_batch_size)
    return DEMO_TURNS


def warmup_step_count(tokenizer, pairs: list, tiny_cfg: Any) -> int:
    """`warmup_steps`, or fewer where that many steps of `warmup_batch_size` pairs would train on more than
    `warmup_tokens` tokens (prompt and reply, at the pairs' mean length over an evenly spaced sample of
    TOKEN_SAMPLE): a warm-up's time grows with its tokens, and an environment whose prompts fill the prompt budget
    has four times household's. Household's default (126 tokens a pair) takes every step."""
    from agentrl.models.fine_tune import encoded_pairs

    if not pairs or tiny_cfg.warmup_steps <= 0:
        return 0
    sample = [pairs[i * len(pairs) // min(TOKEN_SAMPLE, len(pairs))] for i in range(min(TOKEN_SAMPLE, len(pairs)))]
    mean = sum(len(ids) for ids, _ in encoded_pairs(tokenizer, sample, tiny_cfg.max_prompt_tokens)) / len(sample)
    return max(1, min(tiny_cfg.warmup_steps, int(tiny_cfg.warmup_tokens / (mean * tiny_cfg.warmup_batch_size))))


def warm_up(model, tokenizer, pairs: list[tuple[str, str]], tiny_cfg: Any):
    """Supervised steps on (prompt, random admissible reply), the loss on the reply only: `agentrl sft`'s own
    fine-tuning (agentrl/models/fine_tune.py), so that there is one way to warm-start. Returns (model, losses)."""
    from agentrl.models.fine_tune import Schedule, fine_tune

    schedule = Schedule(
        steps=warmup_step_count(tokenizer, pairs, tiny_cfg),
        batch_size=tiny_cfg.warmup_batch_size,
        learning_rate=tiny_cfg.warmup_lr,
        seed=tiny_cfg.seed,
        max_prompt_tokens=tiny_cfg.max_prompt_tokens,
        weight_decay=0.01,  # torch's AdamW default, which the warm-up's own loop used before it ran on SFTTrainer
    )
    # the loss from the full logits, as the build the default's measured curve rests on (fine_tune.full_logits_trainer)
    return fine_tune(model, tokenizer, pairs, schedule, doing="tiny model: warm-up", full_logits=True)


def valid_action_rate(model, tokenizer, suite, env_cfg: Any, tiny_cfg: Any, turns: int = 400) -> dict[str, float]:
    """Sample the warmed-up model at temperature 1 on held-out tasks: how often is its reply an admissible action,
    and how widely does it spread over the admissible actions (agentrl/rollout/exploration.py)?"""
    from agentrl.rollout.exploration import AdmissibleProbe
    from agentrl.rollout.policies import HFPolicy, SamplingSpec

    probe = AdmissibleProbe(
        HFPolicy(model, tokenizer, SamplingSpec(1.0, max_new_tokens=24, max_prompt_tokens=tiny_cfg.max_prompt_tokens)),
        model,
        tokenizer,
        tiny_cfg.max_prompt_tokens,
    )
    batch = _play(suite, env_cfg, probe, suite.eval_split, 50_000, turns, "tiny model: checking its replies", tiny_cfg)
    rows = max(len(batch), 1)
    return {
        "valid_action_rate": sum(batch.valid) / rows,  # a parsable <action> reply
        "admissible_action_rate": sum(batch.admissible) / rows,  # ... that the environment accepted
        "warm_start_success": sum(e.won for e in batch.episodes) / max(len(batch.episodes), 1),
        **probe.summary(),  # admissible_entropy (1: the random admissible policy's spread), admissible_mass
    }
