"""Qwen2.5-shaped folders (agentrl/models/qwen_shapes.py, agentrl/models/qwen_tokenizer.py): the published
architecture numbers, a tokenizer of Qwen2.5's size that every reader tokenizes alike, and a small folder trained
through the real CLI."""

from __future__ import annotations

import json

import pytest

from agentrl.models import qwen_shapes, qwen_tokenizer
from agentrl.models.qwen_shapes import SIZES
from agentrl.models.qwen_tokenizer import ADDED_TOKENS, QWEN25_REGULAR_TOKENS

TEXTS = [
    "go to fridge 1",
    "You arrive at cabinet 2. The cabinet 2 is closed. In it, you see a mug 3, and a apple 12.",
    "<think>the apple 1 is hot</think>\n<action>move apple 1 to countertop 1</action>",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    "  two spaces,\ttabs\n\n\nnewlines and digits 1234567 ",
    "ünïcode: café, 日本語, emoji 🙂, and a <tool_call>{}</tool_call>",
    "I'M here, they'll go; it's DONE's",
]


@pytest.mark.parametrize(
    "size,layers,hidden,heads,kv_heads,intermediate,tied",
    [
        ("0.5b", 24, 896, 14, 2, 4864, True),
        ("1.5b", 28, 1536, 12, 2, 8960, True),
        ("7b", 28, 3584, 28, 4, 18944, False),
    ],
)
def test_published_architectures(size, layers, hidden, heads, kv_heads, intermediate, tied):
    config = qwen_shapes.qwen_config(size)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (layers, hidden, heads)
    assert (config.num_key_value_heads, config.intermediate_size, config.tie_word_embeddings) == (
        kv_heads,
        intermediate,
        tied,
    )
    assert config.vocab_size == 151_936 and config.rope_parameters["rope_theta"] == 1_000_000.0
    assert not config.use_sliding_window
    assert (config.bos_token_id, config.eos_token_id) == (151643, 151645)
    # Counted on the meta device, without memory; the model cards give billions to two places.
    total, body = qwen_shapes.parameter_count(config)
    assert (round(total / 1e9, 2), round(body / 1e9, 2)) == qwen_shapes.PUBLISHED_PARAMETERS[size]


def test_qwen2_layers_carry_a_qkv_bias():
    import torch
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(qwen_shapes.qwen_config("0.5b"))
    attention = model.model.layers[0].self_attn
    assert all(getattr(attention, p).bias is not None for p in ("q_proj", "k_proj", "v_proj"))
    assert attention.o_proj.bias is None


@pytest.fixture(scope="module")
def full_tokenizer(tmp_path_factory):
    """Qwen2.5's size (151,643 + 22 tokens) beside a Qwen2 config, as in a downloaded folder."""
    folder = tmp_path_factory.mktemp("qwen-tokenizer")
    core = qwen_tokenizer.build_tokenizer(qwen_tokenizer.environment_texts(turns=200))
    qwen_tokenizer.save_tokenizer(core, folder, QWEN25_REGULAR_TOKENS)
    qwen_shapes.qwen_config("test").save_pretrained(folder)
    return folder


def test_tokenizer_has_qwen25s_size_and_added_tokens(full_tokenizer):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(full_tokenizer)
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    assert len(tokenizer) == 151_665
    for offset, (content, _) in enumerate(ADDED_TOKENS):
        assert tokenizer.convert_tokens_to_ids(content) == 151_643 + offset
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 151645)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|endoftext|>", 151643)
    assert tokenizer.bos_token is None
    vocab = json.loads((full_tokenizer / "vocab.json").read_text())
    merges = (full_tokenizer / "merges.txt").read_text().splitlines()[1:]
    assert len(vocab) == QWEN25_REGULAR_TOKENS and len(merges) == QWEN25_REGULAR_TOKENS - 256


def test_every_reader_gets_the_same_ids(full_tokenizer):
    """AutoTokenizer rebuilds a qwen2 folder's tokenizer as Qwen2Tokenizer from vocabulary and merges;
    tokenizer.json read by `tokenizers` and agentrl's loader must give the same ids."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from agentrl.models.load import load_tokenizer

    raw = Tokenizer.from_file(str(full_tokenizer / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(full_tokenizer)
    ours = load_tokenizer(str(full_tokenizer))
    assert ours.padding_side == "left"
    environment = qwen_tokenizer.environment_texts(turns=20, seed=7)[:6]  # text the vocabulary was not built from
    for text in TEXTS + environment:
        ids = raw.encode(text, add_special_tokens=False).ids
        assert auto(text, add_special_tokens=False)["input_ids"] == ids, text
        assert ours(text, add_special_tokens=False)["input_ids"] == ids, text
        assert auto.decode(ids) == text
    words = auto("You arrive at cabinet 2.", add_special_tokens=False)["input_ids"]
    assert len(words) <= 8  # environment words are whole tokens, as in Qwen's vocabulary


def test_chat_template_is_qwen25s(full_tokenizer):
    from agentrl.models.load import load_tokenizer

    tokenizer = load_tokenizer(str(full_tokenizer))
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    own = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
    assert tokenizer.apply_chat_template(own, tokenize=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
    )


@pytest.mark.slow
def test_a_small_folder_trains_evaluates_and_keeps_its_tokenizer(run_cli, tmp_path):
    """`model.path=<folder>` through `agentrl train` (and its final held-out evaluation), as a downloaded
    model would go; the checkpoint's tokenizer gives the folder's ids."""
    from transformers import AutoTokenizer

    from agentrl.models.load import load_model, load_tokenizer

    folder = tmp_path / "qwen-test"
    report = qwen_shapes.build_folder("test", folder, regular_tokens=2048, dtype="fp32")
    assert report["tokenizer_vocab"] == 2048 + len(ADDED_TOKENS) and report["model_vocab"] == 2176
    model, tokenizer = load_model(str(folder)), load_tokenizer(str(folder))
    assert model.config.eos_token_id == tokenizer.eos_token_id == 2050
    assert model.generation_config.eos_token_id == [2050, 2048] and model.generation_config.top_k == 20

    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "model=qwen2.5-0.5b-instruct",
        f"model.path={folder}",
        "trainer.iterations=1",
        "trainer.tasks_per_iteration=2",
        "trainer.group_size=2",
        "trainer.eval_every=0",
        "rollout.max_new_tokens=8",
        "eval.num_tasks=1",
        "logger=none",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["rollout/completion_tokens"] > 0 and "train/loss" in records[-1]
    assert 0.0 <= records[-1]["eval/success"] <= 1.0
    checkpoint = run_dir / "checkpoints" / "last"
    saved = AutoTokenizer.from_pretrained(checkpoint)
    for text in TEXTS:
        assert (
            saved(text, add_special_tokens=False)["input_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]
        )
    assert saved.chat_template == tokenizer.chat_template


def test_sizes_are_the_published_ones_and_a_test_size():
    assert set(SIZES) == {"0.5b", "1.5b", "7b", "test"}
    with pytest.raises(ValueError, match="unknown size"):
        qwen_shapes.qwen_config("3b")


def test_hf_rollouts_sample_the_policy_not_the_folders_generation_defaults(tmp_path):
    """A Qwen2.5-Instruct folder's generation_config.json asks for a repetition penalty (1.1, or 1.05 at 7B) and
    top-k 20; `generate` applies whatever the call leaves unset. The rollout must sample the policy itself:
    its behaviour log-probs are the model's own log-softmax of the sampled tokens."""
    import torch

    from agentrl.models.load import load_model, load_tokenizer
    from agentrl.rollout.collector import Turn
    from agentrl.rollout.policies import HFPolicy, SamplingSpec

    folder = tmp_path / "qwen-test"
    qwen_shapes.build_folder("test", folder, regular_tokens=1024, dtype="fp32", texts=TEXTS * 20)
    model, tokenizer = load_model(str(folder)), load_tokenizer(str(folder))
    assert model.generation_config.repetition_penalty == 1.1
    torch.manual_seed(0)
    policy = HFPolicy(model, tokenizer, SamplingSpec(temperature=1.0, max_new_tokens=12))
    [reply] = policy.act([Turn(prompt="go to fridge 1 " * 20, observation=None)])
    ids = torch.tensor([reply.prompt_ids + reply.completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(reply.prompt_ids) - 1 : -1]
    own = logits.log_softmax(-1).gather(-1, torch.tensor(reply.completion_ids)[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(reply.logprobs), own, atol=1e-4)
