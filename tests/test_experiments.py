"""The published-run recipes in conf/experiment/: each composes with `+experiment=NAME` (alone and with a hardware
profile), passes the config checks, holds the reference's values, and says in its header where they come from.

Composition only: no model is loaded. docs/reproducing.md gives every value's source line.
"""

from __future__ import annotations

import functools
import re

import pytest
from hydra import compose
from omegaconf import OmegaConf

from agentrl.config.checks import check_config
from agentrl.config.typed import typed
from tests.conftest import REPO, hydra_initialized

EXPERIMENTS = REPO / "conf" / "experiment"
# agentrl's own recipes (not a paper's reproduction): no reference values or source lines, see their own test below
OWN_RECIPES = ("smollm2_calculator_cpu", "smollm2_household", "smollm2_household_cpu")
# agentrl's recipes of the tiny model on worlds agentrl did not make (env=gem): the tiny recipe on another env
TINY_RECIPES = ("gem_2048", "gem_guessthenumber", "gem_sokoban")
RECIPES = sorted(p.stem for p in EXPERIMENTS.glob("*.yaml") if p.stem not in OWN_RECIPES + TINY_RECIPES)
REFERENCES = ("verl-agent", "EPO", "ARPO")  # the repositories a recipe may name as its source

# verl-agent's ALFWorld scripts and the ppo_trainer.yaml defaults they inherit (docs/reproducing.md)
VERL_AGENT_ALFWORLD = {
    "env.name": "alfworld",
    "env.max_steps": 50,
    "env.history_length": 2,
    "env.prompt_template": "alfworld",
    "seed": 0,
    "algo.norm": "std",
    "algo.episode_stats": "rows",
    "algo.invalid_penalty": 0.1,
    "algo.clip_epsilon": 0.2,
    "algo.clip_epsilon_high": None,
    "algo.dual_clip": 3.0,
    "algo.kl_coef": 0.01,
    "algo.kl_clamp": 10.0,
    "algo.loss_aggregation": "token_mean",
    "algo.entropy.mode": "bonus",
    "algo.entropy.coef": 1e-3,
    "algo.entropy.aggregation": "token",
    "algo.replay.enabled": False,
    "rollout.temperature": 1.0,
    "rollout.top_p": 1.0,
    "rollout.max_new_tokens": 512,
    "rollout.max_prompt_tokens": 2048,
    "trainer.iterations": 150,
    "trainer.tasks_per_iteration": 16,
    "trainer.group_size": 8,
    "trainer.task_pool": None,
    "trainer.learning_rate": 1e-6,
    "trainer.weight_decay": 0.01,
    "trainer.max_grad_norm": 1.0,
    "trainer.mini_batch_size": 256,
    "trainer.micro_batch_size": 32,
    "trainer.epochs": 1,
    "trainer.gradient_checkpointing": True,  # enable_gradient_checkpointing=True
    "trainer.eval_every": 5,
    "eval.split": None,
    "eval.num_tasks": 128,
    "eval.episodes_per_task": 1,
    "eval.temperature": 0.4,
    "eval.greedy": False,
    "model.lora.enabled": False,
}
GIGPO = {
    "algo.estimator": "gigpo",
    "algo.gigpo.gamma": 0.95,
    "algo.gigpo.step_weight": 1.0,
    "algo.gigpo.anchor": "observation",
    "algo.gigpo.similarity": None,
}
QWEN_1_5B = {"model.name": "qwen2.5-1.5b-instruct", "model.hub_id": "Qwen/Qwen2.5-1.5B-Instruct"}
QWEN_7B = {"model.name": "qwen2.5-7b-instruct", "model.hub_id": "Qwen/Qwen2.5-7B-Instruct"}

EXPECTED = {
    "grpo_alfworld_1.5b": {**VERL_AGENT_ALFWORLD, **QWEN_1_5B, "algo.estimator": "grpo"},
    "gigpo_alfworld_1.5b": {**VERL_AGENT_ALFWORLD, **QWEN_1_5B, **GIGPO},
    "grpo_alfworld_7b": {**VERL_AGENT_ALFWORLD, **QWEN_7B, "algo.estimator": "grpo", "trainer.micro_batch_size": 4},
    "gigpo_alfworld_7b": {**VERL_AGENT_ALFWORLD, **QWEN_7B, **GIGPO, "trainer.micro_batch_size": 4},
    "gigpo_alfworld_7b_lora": {
        **VERL_AGENT_ALFWORLD,
        **QWEN_7B,
        **GIGPO,
        "model.lora.enabled": True,
        "model.lora.rank": 64,
        "model.lora.alpha": 64,
        "model.lora.dropout": 0.0,
        "trainer.learning_rate": 3e-6,
        "algo.kl_coef": 0.0,
    },
    "epo_alfworld": {
        **VERL_AGENT_ALFWORLD,
        "model.name": "qwen2.5-3b-instruct",
        "model.hub_id": "Qwen/Qwen2.5-3B-Instruct",
        "seed": 1,
        "algo.estimator": "grpo",
        "algo.entropy.mode": "epo",
        "algo.entropy.coef": 1e-3,
        "algo.entropy.aggregation": "trajectory",
        "algo.entropy.alpha": 0.1,
        "algo.entropy.kappa_low": 0.0,
        "algo.entropy.kappa_high": 2.0,
        "algo.entropy.gamma_beta": 3.0,
        "eval.num_tasks": 16,
    },
    "epo_scienceworld": {
        "env.name": "scienceworld",
        "env.max_steps": 30,
        "env.history_length": 2,
        "env.prompt_template": "scienceworld",
        "env.simplifications": "easy",
        "env.env_step_limit": 100,
        "model.hub_id": "Qwen/Qwen2.5-7B-Instruct",
        "seed": 0,
        "algo.estimator": "grpo",
        "algo.norm": "std",
        "algo.invalid_penalty": 0.1,
        "algo.kl_coef": 0.01,
        "algo.entropy.mode": "epo",
        "algo.entropy.coef": 1e-3,
        "algo.entropy.aggregation": "trajectory",
        "algo.entropy.alpha": 0.05,
        "algo.entropy.kappa_low": 0.0,
        "algo.entropy.kappa_high": 2.0,
        "algo.entropy.gamma_beta": 3.0,
        "rollout.max_prompt_tokens": 2048,
        "rollout.max_new_tokens": 512,
        "trainer.iterations": 125,
        "trainer.tasks_per_iteration": 16,
        "trainer.group_size": 8,
        "trainer.mini_batch_size": 64,
        "trainer.gradient_checkpointing": True,
        "eval.num_tasks": 16,
        "eval.temperature": 0.4,
    },
    "arpo_alfworld": {
        **VERL_AGENT_ALFWORLD,
        **QWEN_1_5B,
        "algo.estimator": "grpo",
        "algo.clip_epsilon_high": 0.3,
        "algo.kl_coef": 0.0,
        "algo.entropy.mode": "none",
        "algo.entropy.aggregation": "trajectory",  # the schema default: no entropy term to aggregate
        "algo.replay.enabled": True,
        "algo.replay.capacity": 8,
        "algo.replay.max_return": 10.0,
        "algo.replay.success_threshold": 0.1,
        "algo.replay.fail_std": 0.05,
        "algo.replay.fail_mean": 0.2,
        "algo.replay.importance_correction": False,
        "algo.replay.filter_trials": 0,
        "trainer.iterations": 120,
        "trainer.task_pool": 128,
    },
}


def composed(name: str, *overrides: str):
    with hydra_initialized():
        return typed(compose(config_name="train", overrides=[f"+experiment={name}", *overrides]))


def value(cfg, key: str):
    return functools.reduce(getattr, key.split("."), cfg)


def test_the_recipes_are_found():
    assert RECIPES, f"no recipe in {EXPERIMENTS}"
    assert all((EXPERIMENTS / f"{name}.yaml").is_file() for name in OWN_RECIPES)


@pytest.mark.parametrize("name", OWN_RECIPES)
def test_an_own_recipe_composes_names_its_commands_and_leaves_the_hardware(name):
    cfg = composed(name)
    check_config(cfg)
    assert cfg.model.name != "tiny" and cfg.model.tiny is None
    text = "\n".join(header(name))
    assert re.search(rf"^# agentrl train \+experiment={re.escape(name)}\b", text, re.M)
    assert "agentrl sft" in text, "the warm start it needs is named"
    raw = OmegaConf.load(EXPERIMENTS / f"{name}.yaml")
    assert "hardware" not in raw and "backend" not in raw.get("rollout", {})
    assert name in (REPO / "docs" / "models.md").read_text()
    sft_lines = [line for line in header(name) if re.search(r"agentrl sft \S+=", line)]  # the commands
    template = raw.get("env", {}).get("prompt_template")
    if template is not None:  # the warm start learns the prompts the recipe plays with
        assert sft_lines and all(f"env.prompt_template={template}" in line for line in sft_lines), sft_lines


@pytest.mark.parametrize("name", TINY_RECIPES)
def test_a_tiny_recipe_composes_on_gem_names_its_command_and_leaves_the_hardware(name):
    cfg = composed(name)
    check_config(cfg)
    assert cfg.model.name == "tiny" and cfg.env.name == "gem" and cfg.env.id.startswith("game:")
    assert re.search(rf"^# agentrl train \+experiment={re.escape(name)}\b", "\n".join(header(name)), re.M)
    raw = OmegaConf.load(EXPERIMENTS / f"{name}.yaml")
    # the hardware profile chooses the generation backend; a recipe may set how rollouts sample (temperature)
    assert "hardware" not in raw and not {"backend", "vllm"} & set(raw.get("rollout", {}))
    assert "\n## GEM\n" in (REPO / "docs" / "benchmarks.md").read_text()  # where its status line points


@pytest.mark.parametrize("name", TINY_RECIPES)
@pytest.mark.parametrize("config", ["train", "sft"])
def test_a_tiny_recipes_seed_is_its_whole_start_the_build_the_clone_and_rl(name, config):
    with hydra_initialized():
        for seed in (0, 3):
            cfg = typed(compose(config_name=config, overrides=[f"+experiment={name}", f"seed={seed}"]))
            assert cfg.seed == seed and cfg.model.tiny.seed == seed
        # one build for several RL seeds stays a command-line choice
        cfg = typed(compose(config_name=config, overrides=[f"+experiment={name}", "seed=3", "model.tiny.seed=1"]))
        assert cfg.seed == 3 and cfg.model.tiny.seed == 1


def test_the_embedded_default_keeps_its_shipped_build_whatever_the_seed():
    with hydra_initialized():
        for seed in (0, 3):
            cfg = typed(compose(config_name="train", overrides=[f"seed={seed}"]))
            assert cfg.model.tiny.seed == 1 and cfg.model.tiny.shipped  # agentrl/models/shipped/household's


@pytest.mark.parametrize("hardware", [None, "gpu"])
@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_composes_and_passes_the_checks(name, hardware):
    overrides = [f"hardware={hardware}"] if hardware else []
    cfg = composed(name, *overrides)
    check_config(cfg)
    assert cfg.model.name != "tiny" and cfg.model.tiny is None, "a recipe picks a real model, not model=tiny's recipe"
    assert cfg.model.hub_id or cfg.model.path


@pytest.mark.parametrize("hardware", [None, "gpu", "multi_gpu"])
@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_leaves_the_hardware_to_the_profile(name, hardware):
    overrides = [f"hardware={hardware}"] if hardware else []
    with hydra_initialized():
        plain = typed(compose(config_name="train", overrides=overrides))
        cfg = typed(compose(config_name="train", overrides=[f"+experiment={name}", *overrides]))
    assert cfg.hardware == plain.hardware
    assert cfg.rollout.backend == plain.rollout.backend and cfg.rollout.vllm == plain.rollout.vllm
    if cfg.trainer.mini_batch_size is not None:  # each rank takes an equal share of a mini-batch
        assert cfg.trainer.mini_batch_size % cfg.hardware.num_processes == 0


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_has_its_values_checked_here(name):
    assert name in EXPECTED, f"add the reference values of conf/experiment/{name}.yaml to EXPECTED"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_recipe_holds_the_reference_values(name):
    cfg = composed(name, "hardware=gpu")
    wrong = {
        key: (value(cfg, key), want)
        for key, want in EXPECTED[name].items()
        if value(cfg, key) != (pytest.approx(want) if isinstance(want, float) else want)
    }
    assert wrong == {}, f"{name}: key: (composed, expected) {wrong}"


def test_the_command_line_still_wins_over_a_recipe():
    cfg = composed("grpo_alfworld_1.5b", "trainer.iterations=20", "model=qwen2.5-0.5b-instruct")
    assert cfg.trainer.iterations == 20 and cfg.model.hub_id == "Qwen/Qwen2.5-0.5B-Instruct"


def header(name: str) -> list[str]:
    """The comment lines at the top of a recipe file."""
    lines = (EXPERIMENTS / f"{name}.yaml").read_text().splitlines()
    return [line for line in lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]]


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_header_names_its_source_its_command_and_its_limits(name):
    lines = header(name)
    assert lines[0] == "# @package _global_"
    text = "\n".join(lines)
    source = re.search(r"^# Source: (.+(?:\n#  .+)*)", text, re.M)
    assert source, f"{name}: no '# Source:' line"
    assert any(ref in source.group(1) for ref in REFERENCES), f"{name}: the source names none of {REFERENCES}"
    assert re.search(r"[\w-]+/[\w./-]+\.(sh|py|yaml|md)\b", source.group(1)), f"{name}: the source names no file"
    assert re.search(rf"^# Run: agentrl train \+experiment={re.escape(name)}\b", text, re.M), f"{name}: no '# Run:'"
    assert re.search(r"^# Cannot reproduce: \S", text, re.M), f"{name}: no '# Cannot reproduce:' line"


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_sets_no_hardware_keys(name):
    raw = OmegaConf.load(EXPERIMENTS / f"{name}.yaml")
    assert "hardware" not in raw and "backend" not in raw.get("rollout", {}) and "vllm" not in raw.get("rollout", {})


@pytest.mark.parametrize("name", RECIPES)
def test_docs_have_a_table_for_every_recipe(name):
    doc = (REPO / "docs" / "reproducing.md").read_text()
    headings = [line for line in doc.splitlines() if line.startswith("## ")]
    assert any(re.search(rf"\b{re.escape(name)}\b", h) for h in headings), f"docs/reproducing.md has no '## {name}'"
