"""`agentrl eval model=NAME`: a model choice evaluated zero-shot, as `agentrl train model=NAME` would start it
(cli/eval_recipe.py composes it; evaluation/held_out.py plays it)."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM

from agentrl.cli.eval_recipe import names_model, with_recipe_config
from agentrl.models.tiny import build_tokenizer


def test_a_model_or_a_model_key_is_composed_as_training():
    assert names_model(["model=smollm2-135m-instruct"]) and names_model(["env=gem", "+model.path=/some/folder"])
    assert not names_model(["env=household", "eval.num_tasks=5", "--random"])


def test_the_model_choice_writes_its_model_and_rollout(tmp_path):
    """SmolLM2's choice as training composes it (no weights are needed to compose): its registry name, and the
    prompt budget its file sets; rollout.* goes to the composition and stays for the evaluation's backend."""
    args = ["model=smollm2-135m-instruct", "env=household", "rollout.max_new_tokens=24", "eval.num_tasks=5"]
    out = with_recipe_config(args, tmp_path)
    assert out[:-1] == ["rollout.max_new_tokens=24", "eval.num_tasks=5"] and out[-1].startswith("recipe_config=")
    written = OmegaConf.to_container(OmegaConf.load(tmp_path / "recipe.yaml"))
    assert (
        written["model"]["registry"] == "smollm2-135m-instruct" and written["model"]["name"] == "smollm2-135m-instruct"
    )
    assert written["rollout"]["max_prompt_tokens"] == 512 and written["rollout"]["max_new_tokens"] == 24
    assert written["env"]["name"] == "household"


def _tiny_hf_model(folder) -> str:
    """A small Qwen2 model and tokenizer saved as a Hugging Face folder (a local copy of a hub or registry model)."""
    torch.manual_seed(0)
    tokenizer = build_tokenizer(["go to fridge 1", "open drawer 2", "take apple 1 from table 1"], vocab_size=300)
    tokenizer.save_pretrained(folder)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return str(folder)


def test_a_registry_choice_from_a_local_copy_is_evaluated_zero_shot(run_cli, tmp_path):
    source, out = _tiny_hf_model(tmp_path / "weights"), tmp_path / "eval"
    result = run_cli(
        "eval",
        "model=smollm2-135m-instruct",
        f"model.path={source}",  # wins over the registry package: nothing is fetched
        "env=household",
        "env.max_steps=2",
        "eval.num_tasks=2",
        f"output={out}",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    protocol = json.loads((out / "eval.json").read_text())["protocol"]
    assert protocol["policy"] == "model=smollm2-135m-instruct, zero-shot" and protocol["backend"] == "hf"
    assert protocol["tasks"] == 2 and protocol["sources"]["num_tasks"] == "command line"
    episodes = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(episodes) == 2


def test_the_tiny_model_is_evaluated_on_its_own_prompts(run_cli, tmp_path):
    out = tmp_path / "eval"
    # household's default settings: the shipped build loads (another env.* setting would build one, for minutes)
    result = run_cli("eval", "model=tiny", "env=household", "eval.num_tasks=2", f"output={out}")
    assert result.returncode == 0, result.stderr[-2000:]
    protocol = json.loads((out / "eval.json").read_text())["protocol"]
    assert protocol["policy"] == "model=tiny, zero-shot"
    assert protocol["env"]["prompt_template"] == "compact"  # the tiny model's, as its training composes it
    assert protocol["sources"]["temperature"] == "composed"


@pytest.mark.parametrize("other", [["--random"], ["checkpoint=outputs/some-run"]], ids=["random", "checkpoint"])
def test_a_model_with_a_checkpoint_or_random_play_is_one_line(run_cli, tmp_path, other):
    result = run_cli("eval", "model=tiny", *other)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: model=... evaluates that model zero-shot; a checkpoint carries its own model and --random plays none: "
        "give one of the three"
    )
