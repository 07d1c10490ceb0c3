"""Qwen2.5-shaped models with random weights and a tokenizer of Qwen2.5's size, built offline.

What a real-size run costs (memory for the 151,936-row logits and the reference copy, time per
iteration) depends on the architecture and the vocabulary, not on the weights. Nothing can be
downloaded here, so `build_folder` writes what `hf download Qwen/Qwen2.5-<size>-Instruct` would
give, with random weights and a locally made vocabulary:

- `config.json` and `generation_config.json`: Qwen2.5-<size>-Instruct's architecture numbers
  (`SIZES`) and sampling defaults (`GENERATION`), `model.safetensors` of random weights (bf16, as
  published);
- a byte-level BPE tokenizer of exactly Qwen2.5's size: 151,643 regular tokens, then the 22 added
  tokens at ids 151,643-151,664 (`ADDED_TOKENS`: `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, ...),
  151,665 in all, and Qwen2.5-Instruct's chat template (`CHAT_TEMPLATE`), saved as the hub folder
  saves it (`tokenizer.json`, `vocab.json`, `merges.txt`, `tokenizer_config.json` naming
  `Qwen2Tokenizer`).

The vocabulary: BPE is trained on the household environment's own prompts (so that environment
text tokenizes into words, as in Qwen's vocabulary), then filled up to the real size with
synthetic merges of non-ASCII bytes (pairs, then triples), which ASCII text never reaches. The
tokenizer's normaliser, pre-tokenizer and decoder are Qwen2's (transformers' `Qwen2Tokenizer`):
`AutoTokenizer.from_pretrained(folder)` rebuilds a Qwen2 folder's tokenizer from its vocabulary
and merges with that pipeline, and gets the ids that `tokenizer.json` gives
(tests/test_qwen_shapes.py checks this).

The weights are random: the model samples near-uniform tokens, almost never the end token, so
every reply runs to `rollout.max_new_tokens`. Good for memory and time, not for learning.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

QWEN25_VOCAB_SIZE = 151_936  # rows of the embedding and the LM head (the tokenizer's 151,665, padded)
QWEN25_REGULAR_TOKENS = 151_643  # BPE tokens, ids 0-151,642

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

# Qwen2.5's added tokens, in id order from QWEN25_REGULAR_TOKENS: 14 special ones, then 8 plain ones.
_SPECIAL = "endoftext im_start im_end object_ref_start object_ref_end box_start box_end quad_start quad_end"
_SPECIAL += " vision_start vision_end vision_pad image_pad video_pad"
_PLAIN = "fim_prefix fim_middle fim_suffix fim_pad repo_name file_sep"
ADDED_TOKENS: list[tuple[str, bool]] = [
    *[(f"<|{name}|>", True) for name in _SPECIAL.split()],
    ("<tool_call>", False),
    ("</tool_call>", False),
    *[(f"<|{name}|>", False) for name in _PLAIN.split()],
]

# Qwen2.5-*-Instruct's chat template, as published (the default system prompt when none is given).
CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
DEFAULT_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
TRAINED_TOKENS = 8192  # at most this many regular tokens come from BPE training on the environment's text


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


# --------------------------------------------------------------------------- the tokenizer


def environment_texts(turns: int = 600, seed: int = 0) -> list[str]:
    """Prompts (ALFWorld template, history 2) and replies of a random admissible policy on the household
    levels, the chat template's default system prompt and its markers: the text the vocabulary is trained on."""
    from omegaconf import OmegaConf

    from agentrl.config.envs import HouseholdEnvConfig
    from agentrl.envs.registry import make_suite
    from agentrl.rollout.collector import PromptSpec, collect
    from agentrl.rollout.policies import RandomPolicy

    texts = [DEFAULT_SYSTEM_PROMPT, "system\n", "user\n", "assistant\n"]
    levels = ("default", "long")
    for n, level in enumerate(levels):
        env = OmegaConf.structured(HouseholdEnvConfig(level=level, prompt_template="alfworld", history_length=2))
        suite = make_suite(env, faults=False)
        episodes = max(2, turns // len(levels) // suite.max_steps)
        tasks = [suite.task("train", 900_000 + seed * 1000 + n * 100 + i) for i in range(episodes)]
        batch = collect(suite, tasks, 1, RandomPolicy(seed + n), PromptSpec("alfworld", 2))
        texts += batch.prompt + batch.completion
    return texts


def _extend(vocab: dict[str, int], merges: list[tuple[str, str]], size: int) -> None:
    """Add synthetic tokens (and their merges) until `vocab` has `size` entries: every pair of non-ASCII
    bytes, then those pairs followed by one more non-ASCII byte. ASCII text never meets these merges, so
    the trained part tokenizes the environment's text as trained; a merge's parts always rank before it."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # byte-level BPE's byte -> character table

    table = bytes_to_unicode()
    high = [table[b] for b in range(128, 256)]
    prefixes = list(high)
    while len(vocab) < size:
        grown = []
        for prefix in prefixes:
            for byte in high:
                token = prefix + byte
                if token in vocab:
                    continue
                vocab[token] = len(vocab)
                merges.append((prefix, byte))
                grown.append(token)
                if len(vocab) == size:
                    return
        prefixes = grown


def build_tokenizer(texts: list[str], regular_tokens: int = QWEN25_REGULAR_TOKENS):
    """A `tokenizers.Tokenizer` with Qwen2's pipeline, `regular_tokens` BPE tokens, then `ADDED_TOKENS`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    def qwen2_pipeline(tok: Tokenizer) -> Tokenizer:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        return tok

    if regular_tokens < 512:  # the byte alphabet, and room for merges
        raise ValueError(f"regular_tokens must be at least 512, got {regular_tokens}")
    trained = qwen2_pipeline(Tokenizer(models.BPE()))
    trainer = trainers.BpeTrainer(
        vocab_size=min(TRAINED_TOKENS, regular_tokens // 2),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    trained.train_from_iterator(texts, trainer)
    state = json.loads(trained.to_str())["model"]
    vocab = dict(sorted(state["vocab"].items(), key=lambda item: item[1]))
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    _extend(vocab, merges, regular_tokens)
    core = qwen2_pipeline(Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False)))
    for content, special in ADDED_TOKENS:  # one at a time: ids in ADDED_TOKENS' order
        core.add_tokens([AddedToken(content, special=special, normalized=False)])
    return core


def tokenizer_config(regular_tokens: int) -> dict[str, Any]:
    """Qwen2.5-*-Instruct's tokenizer_config.json, for a vocabulary of `regular_tokens` regular tokens."""
    decoder = {
        str(regular_tokens + i): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for i, (content, special) in enumerate(ADDED_TOKENS)
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for c, special in ADDED_TOKENS if special and c != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def save_tokenizer(core, folder: Path, regular_tokens: int) -> None:
    """The hub's file set: tokenizer.json, vocab.json, merges.txt, tokenizer_config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    core.save(str(folder / "tokenizer.json"))
    model = json.loads(core.to_str())["model"]
    (folder / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(regular_tokens), indent=2))


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
