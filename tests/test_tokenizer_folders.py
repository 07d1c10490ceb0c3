"""Every model folder agentrl writes tokenizes the same way in every reader.

Readers outside agentrl (vLLM, evaluation harnesses, users' scripts) call plain
`AutoTokenizer.from_pretrained(folder)`, which on a qwen2 folder rebuilds the tokenizer as
`Qwen2Tokenizer` from the vocabulary and merges. The ids of training come from tokenizer.json
as saved. The two must agree on the tiny model, a checkpoint and an export. vLLM's own loading
is checked in tests/with_vllm.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from agentrl.models.load import load_tokenizer

STRINGS = [
    "go to fridge 1",
    "<action>take apple 12 from countertop 3</action>",
    "<think>the mug is in cabinet 10</think><action>open cabinet 10</action>",
    "<|im_start|>user\nYou are in the middle of a room. Looking quickly around you, you see a bed 1.<|im_end|>\n",
    "Your task is to: put two cellphone in bed.\n\nAdmissible actions: [go to desk 2, inventory]",
    "Ünïcödé  double  spaces\n\n\ttabs 2024 and 99 bottles",
    "",
]


def tokenization_by_reader(folder: Path) -> dict[str, list[list[int]]]:
    """The ids of every string, from tokenizer.json as saved, agentrl's loader and plain AutoTokenizer."""
    from transformers import AutoTokenizer

    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ours, auto = load_tokenizer(str(folder)), AutoTokenizer.from_pretrained(folder)
    readers = {
        "tokenizer.json": lambda s: raw.encode(s, add_special_tokens=False).ids,
        "agentrl.load_tokenizer": lambda s: ours(s, add_special_tokens=False)["input_ids"],
        "AutoTokenizer": lambda s: auto(s, add_special_tokens=False)["input_ids"],
    }
    return {name: [encode(s) for s in STRINGS] for name, encode in readers.items()}


def assert_every_reader_agrees(folder: Path) -> None:
    ids = tokenization_by_reader(folder)
    for name, got in ids.items():
        assert got == ids["tokenizer.json"], f"{name} tokenizes {folder.name} differently"


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory, cache_dir) -> Path:
    from tests.conftest import agentrl_cli

    where = tmp_path_factory.mktemp("tokenizer-run")
    result = agentrl_cli(cache_dir, where, "train", "+debug=fast", "logger=none", f"hydra.run.dir={where / 'run'}")
    assert result.returncode == 0, result.stderr[-2000:]
    return where / "run"


def test_the_tiny_model_folder(fast_run, cache_dir):
    built = sorted((cache_dir / "tiny").glob("household-*"))
    assert built, "the run built no tiny model in the session's cache"
    for folder in built:
        assert_every_reader_agrees(folder)


def test_a_checkpoint(fast_run):
    assert_every_reader_agrees(fast_run / "checkpoints" / "last")


def test_an_export(fast_run, run_cli, tmp_path):
    result = run_cli("export", str(fast_run), "--out", str(tmp_path / "export"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert_every_reader_agrees(tmp_path / "export")


def test_folders_of_the_old_split_are_still_read_as_trained(tmp_path):
    """Before, the tiny tokenizer split words with GPT-2's regex. AutoTokenizer misreads such a folder
    (Qwen2's split separates digits), but agentrl's loader reads tokenizer.json as it was trained."""
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # the old split
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        ["go to fridge 1, go to desk 2"] * 50,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>").save_pretrained(
        tmp_path
    )
    Qwen2Config(vocab_size=300, hidden_size=64, num_attention_heads=2, num_hidden_layers=1).save_pretrained(tmp_path)

    ids = tokenization_by_reader(tmp_path)
    assert ids["agentrl.load_tokenizer"] == ids["tokenizer.json"]
    assert ids["AutoTokenizer"][0] != ids["tokenizer.json"][0]  # "go to fridge 1": why agentrl keeps its loader
