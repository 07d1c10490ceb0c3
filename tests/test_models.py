"""Model and tokenizer loading: ids survive a save/load round trip; offline hub ids fail with one line."""

from __future__ import annotations

import json

import pytest
from transformers import Qwen2Config

from agentrl.errors import UserError
from agentrl.models.load import load_model, load_tokenizer
from agentrl.models.tiny import build_tokenizer

TEXTS = [
    "<action>go to fridge 1</action>",
    "Task: put some mug in shelf.\nNow: You arrive at cabinet 2. The cabinet 2 is closed.",
    "<think>the apple 1 is hot</think><action>move apple 1 to countertop 1</action>",
    "ünïcode and digits 12345",
]


def test_locally_trained_tokenizer_keeps_its_ids_beside_a_qwen2_config(tmp_path):
    tokenizer = build_tokenizer(TEXTS * 20, vocab_size=300)
    tokenizer.save_pretrained(tmp_path)
    Qwen2Config(vocab_size=len(tokenizer)).save_pretrained(tmp_path)  # the trap: AutoTokenizer would pick Qwen2's
    loaded = load_tokenizer(str(tmp_path))
    for text in TEXTS:
        expected = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert loaded(text, add_special_tokens=False)["input_ids"] == expected
        assert loaded.decode(expected) == text
    assert loaded.padding_side == "left" and loaded.pad_token == "<|endoftext|>" and loaded.eos_token == "<|im_end|>"


def test_action_tags_are_single_tokens_kept_by_decode(tmp_path):
    tokenizer = build_tokenizer(TEXTS * 20, vocab_size=300)
    ids = tokenizer("<action>look</action><|im_end|>", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids[0]) == "<action>"
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<action>look</action>"


def test_unreachable_hub_model_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as err:
        load_tokenizer("agentrl-test/no-such-model")
    message = str(err.value)
    assert "\n" not in message and "model.path" in message and "agentrl-test/no-such-model" in message


def test_corrupt_local_model_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(UserError) as err:
        load_model(str(tmp_path))
    assert str(err.value).startswith(f"cannot load the model in {tmp_path}")


def test_corrupt_local_tokenizer_is_one_line(tmp_path):
    tokenizer = build_tokenizer(TEXTS * 20, vocab_size=300)
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{ truncated")
    with pytest.raises(UserError) as err:
        load_tokenizer(str(tmp_path))
    assert str(err.value).startswith(f"cannot load the model in {tmp_path}")


def test_a_model_trained_on_another_prompt_template_is_named(tmp_path):
    from omegaconf import OmegaConf

    from agentrl.models.load import prompt_template_change

    folder = tmp_path / "sft" / "model"
    folder.mkdir(parents=True)
    run = OmegaConf.create({"path": str(folder)})
    assert prompt_template_change(run, OmegaConf.create({"prompt_template": "compact"})) is None  # a plain folder
    OmegaConf.save({"env": {"prompt_template": "compact"}}, folder / "agentrl_config.yaml")
    assert prompt_template_change(run, OmegaConf.create({"prompt_template": "compact"})) is None
    line = prompt_template_change(run, OmegaConf.create({"prompt_template": "alfworld"}))
    assert "env.prompt_template=compact" in line and "alfworld" in line and "\n" not in line
    assert prompt_template_change(OmegaConf.create({"path": None}), OmegaConf.create({"prompt_template": "x"})) is None
