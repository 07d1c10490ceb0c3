"""A byte-level BPE tokenizer of exactly Qwen2.5's size, made offline, for the Qwen2.5-shaped folders.

agentrl/models/qwen_shapes.py writes the folders; this module makes their tokenizer: 151,643 regular tokens,
then the 22 added tokens at ids 151,643-151,664 (`ADDED_TOKENS`: `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`,
...), 151,665 in all, and Qwen2.5-Instruct's chat template (`CHAT_TEMPLATE`), saved as the hub folder
saves it (`tokenizer.json`, `vocab.json`, `merges.txt`, `tokenizer_config.json` naming
`Qwen2Tokenizer`).

The vocabulary: BPE is trained on the household environment's own prompts (so that environment
text tokenizes into words, as in Qwen's vocabulary), then filled up to the real size with
synthetic merges of non-ASCII bytes (pairs, then triples), which ASCII text never reaches. The
tokenizer's normaliser, pre-tokenizer and decoder are Qwen2's (transformers' `Qwen2Tokenizer`):
`AutoTokenizer.from_pretrained(folder)` rebuilds a Qwen2 folder's tokenizer from its vocabulary
and merges with that pipeline, and gets the ids that `tokenizer.json` gives
(tests/test_qwen_shapes.py checks this).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

QWEN25_REGULAR_TOKENS = 151_643  # BPE tokens, ids 0-151,642

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


# --------------------------------------------------------------------------- the tokenizer


def environment_texts(turns: int = 600, seed: int = 0) -> list[str]:
    """Prompts (ALFWorld template, history 2) and replies of a random admissible policy on the household
    levels, the chat template's default system prompt and its markers: the text the vocabulary is trained on."""

    from agentrl.config.envs import HouseholdEnvConfig
    from agentrl.envs.registry import make_suite
    from agentrl.rollout.collector import PromptSpec, collect
    from agentrl.rollout.policies import RandomPolicy

    texts = [DEFAULT_SYSTEM_PROMPT, "system\n", "user\n", "assistant\n"]
    levels = ("default", "long")
    for n, level in enumerate(levels):
        env = HouseholdEnvConfig(level=level, prompt_template="alfworld", history_length=2)
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
