"""The embedded tiny model's tokenizer: a byte-level BPE trained on the environment's demonstration text, split and
normalised exactly as Qwen2's, with ChatML's special tokens and agentrl's tags (agentrl/models/tiny.py builds it)."""

from __future__ import annotations

# At most this many characters of demonstrations train the tokenizer: household's 48,000 turns hold about 17 million.
TOKENIZER_TEXT_CHARS = 32_000_000
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAG_TOKENS = ["<action>", "</action>", "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer trained on `texts`, split and normalised exactly as Qwen2's.

    Every reader must get the ids of training. `AutoTokenizer.from_pretrained` on a folder whose
    config says qwen2 (vLLM, evaluation harnesses, users' scripts) ignores tokenizer.json's own
    pre-tokenizer and rebuilds the tokenizer as `Qwen2Tokenizer` from its vocabulary and merges.
    With Qwen2's own pipeline here (NFC, Qwen2's split regex, byte-level without GPT-2's regex),
    that rebuild is the same tokenizer. (GPT-2's split, used before, keeps " 1" whole where Qwen2
    splits digits off, so "go to fridge 1" had 4 ids here and 5 in every other reader.)
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    tokenizer.add_tokens(TAG_TOKENS)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tokenizer_text(pairs: list[tuple[str, str]]) -> list[str]:
    """The text the tokenizer learns from: every prompt, then every reply. Where they hold more than
    TOKENIZER_TEXT_CHARS characters, evenly spaced pairs up to that many (a bounded sample: the prompts are already
    cut to the text their budget can reach, `_play`)."""
    size = sum(len(p) + len(c) for p, c in pairs)
    if size > TOKENIZER_TEXT_CHARS:
        keep = max(1, len(pairs) * TOKENIZER_TEXT_CHARS // size)
        pairs = [pairs[i * len(pairs) // keep] for i in range(keep)]
    return [p for p, _ in pairs] + [c for _, c in pairs]
