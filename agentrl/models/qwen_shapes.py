"""Qwen2.5-shaped models with random weights and a tokenizer of Qwen2.5's size, built offline.

What a real-size run costs (memory for the 151,936-row logits and the reference copy, time per
iteration) depends on the architecture and the vocabulary, not on the weights. Nothing can be
downloaded here, so `build_folder` writes what `hf download Qwen/Qwen2.5-<size>-Instruct` would
give, with random weights and a locally made vocabulary:

- `config.json` and `generation_config.json`: Qwen2.5-<size>-Instruct's architecture numbers
  (`SIZES`) and sampling defaults (`GENERATION`), `model.safetensors` of random weights (bf16, as
  published);
- a byte-level BPE tokenizer of exactly Qwen2.5's size, with Qwen2.5-Instruct's chat template, saved as the hub
  folder saves it: agentrl/models/qwen_tokenizer.py makes it and says how.

This module holds the architecture (`qwen_config`, `generation_config`, `parameter_count`, the embedding's rows
`model_vocab_size`) and writes the folder; the tokenizer is `qwen_tokenizer`'s.

The weights are random: the model samples near-uniform tokens, almost never the end token, so
every reply runs to `rollout.max_new_tokens`. Good for memory and time, not for learning.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from agentrl.models.qwen_tokenizer import (
    ADDED_TOKENS,
    QWEN25_REGULAR_TOKENS,
    build_tokenizer,
    environment_texts,
    save_tokenizer,
)

QWEN25_VOCAB_SIZE = 151_936  # rows of the embedding and the LM head (the tokenizer's 151,665, padded)

# Qwen/Qwen2.5-{0.5B,1.5B,7B}-Instruct config.json: the keys that differ between sizes.
SIZES: dict[str, dict[str, Any]] = {
    "0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_window_layers=21,
        sliding_window=32768,
    ),
    "1.5b": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_window_layers=21,
        sliding_window=32768,
    ),
    "7b": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        tie_word_embeddings=False,
        max_window_layers=28,
        sliding_window=131072,
    ),
    # Not a published size: the same code path at a size a CPU test trains in seconds (head dimension 32).
    "test": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
        max_window_layers=2,
        sliding_window=32768,
    ),
}
# The same in every size (Qwen2 layers also carry a bias on q, k and v: part of Qwen2ForCausalLM itself).
COMMON: dict[str, Any] = dict(
    vocab_size=QWEN25_VOCAB_SIZE,
    hidden_act="silu",
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    rope_theta=1_000_000.0,
    use_sliding_window=False,
    attention_dropout=0.0,
    initializer_range=0.02,
    use_cache=True,
)  # and bos_token_id 151643 (<|endoftext|>), eos_token_id 151645 (<|im_end|>): `qwen_config`
# Qwen2.5-*-Instruct generation_config.json (repetition penalty 1.1 for 0.5B and 1.5B, 1.05 for 7B).
# The token ids (151643 <|endoftext|>, 151645 <|im_end|>) are set by `generation_config`.
GENERATION: dict[str, Any] = dict(
    do_sample=True,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
)
REPETITION_PENALTY = {"0.5b": 1.1, "1.5b": 1.1, "7b": 1.05, "test": 1.1}
# Billions of parameters on the model cards: (all, without the embedding and LM head).
PUBLISHED_PARAMETERS = {"0.5b": (0.49, 0.36), "1.5b": (1.54, 1.31), "7b": (7.61, 6.53)}


def qwen_config(size: str, regular_tokens: int = QWEN25_REGULAR_TOKENS):
    """The `Qwen2Config` of Qwen2.5-<size>-Instruct; fewer `regular_tokens` than Qwen2.5's 151,643 give a
    smaller embedding (`model_vocab_size`), with the end-token ids moved along."""
    from transformers import Qwen2Config

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; known: {', '.join(SIZES)}")
    endoftext, im_end = regular_tokens, regular_tokens + 2  # ADDED_TOKENS' order
    arch = {**COMMON, **SIZES[size], "vocab_size": model_vocab_size(regular_tokens)}
    return Qwen2Config(**arch, bos_token_id=endoftext, eos_token_id=im_end)


def generation_config(size: str, regular_tokens: int = QWEN25_REGULAR_TOKENS):
    """Qwen2.5-<size>-Instruct's generation_config.json (ids moved along with a smaller vocabulary)."""
    from transformers import GenerationConfig

    endoftext, im_end = regular_tokens, regular_tokens + 2
    return GenerationConfig(
        **GENERATION,
        repetition_penalty=REPETITION_PENALTY[size],
        bos_token_id=endoftext,
        pad_token_id=endoftext,
        eos_token_id=[im_end, endoftext],
    )


def parameter_count(config) -> tuple[int, int]:
    """(all parameters, those outside the embedding and LM head) of a model of `config`, counted on the
    meta device (no memory is allocated); tied weights count once."""
    import torch
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    total = sum(p.numel() for p in model.parameters())
    embedding = {id(model.model.embed_tokens.weight): model.model.embed_tokens.weight.numel()}
    embedding[id(model.lm_head.weight)] = model.lm_head.weight.numel()
    return total, total - sum(embedding.values())


# --------------------------------------------------------------------------- the folder


def model_vocab_size(regular_tokens: int) -> int:
    """Rows of the embedding: 151,936 for Qwen2.5's vocabulary; a smaller one is padded to a multiple of 128."""
    if regular_tokens == QWEN25_REGULAR_TOKENS:
        return QWEN25_VOCAB_SIZE
    return 128 * math.ceil((regular_tokens + len(ADDED_TOKENS)) / 128)


def build_folder(
    size: str,
    folder: Path,
    *,
    regular_tokens: int = QWEN25_REGULAR_TOKENS,
    dtype: str = "bf16",
    device: str = "cpu",
    seed: int = 0,
    texts: list[str] | None = None,
) -> dict[str, Any]:
    """Write a Qwen2.5-<size>-Instruct-shaped model folder (random weights) that `model.path=` loads.

    `regular_tokens` below 151,643 makes a smaller vocabulary (and embedding) with the same machinery, for
    tests. The weights are made on `device` in `dtype` and saved in that dtype. Returns a short report."""
    import torch
    from transformers import Qwen2ForCausalLM

    config = qwen_config(size, regular_tokens)
    core = build_tokenizer(texts if texts is not None else environment_texts(), regular_tokens)
    assert core.get_vocab_size() <= config.vocab_size
    save_tokenizer(core, folder, regular_tokens)

    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[dtype]
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=torch_dtype)
    model.generation_config = generation_config(size, regular_tokens)
    model.save_pretrained(folder)
    report = {
        "size": size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "model_vocab": config.vocab_size,
        "tokenizer_vocab": core.get_vocab_size(),
        "dtype": dtype,
    }
    (folder / "qwen_shape.json").write_text(json.dumps(report, indent=2))
    return report
