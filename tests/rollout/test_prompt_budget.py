"""A prompt is tokenised from its tail (rollout/policies.py, `chat_prompts_ids`): the ids kept are those of the whole
prompt, cut to the budget, however long the prompt and whatever its text."""

from __future__ import annotations

import random

import pytest

from agentrl.models.load import load_tokenizer
from agentrl.models.tiny import SHIPPED
from agentrl.rollout.policies import CHARS_PER_TOKEN_BOUND, _templated_ids, chat_prompts_ids


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(SHIPPED / "household"))


def whole_prompt_ids(tokenizer, prompt: str, budget: int) -> list[int]:
    return _templated_ids(tokenizer, [prompt])[0][-budget:]


def log_text(rng: random.Random, chars: int) -> str:
    words = ["[GAME]", "Player", "0", "moves", "left.", "the", "lake", "is", "quiet", "\n", "  ", "fridge", "12,", "ok"]
    text = []
    while sum(map(len, text)) < chars:
        text.append(rng.choice(words) + rng.choice([" ", " ", "", "\n"]))
    return "".join(text)


def test_long_prompts_keep_the_whole_prompts_last_ids(tokenizer):
    rng = random.Random(0)
    for budget in (16, 64, 256):
        prompts = [log_text(rng, rng.randrange(budget * CHARS_PER_TOKEN_BOUND, 40_000)) for _ in range(20)]
        got = chat_prompts_ids(tokenizer, prompts, budget)
        assert [len(row) for row in got] == [budget] * len(prompts)
        assert got == [whole_prompt_ids(tokenizer, prompt, budget) for prompt in prompts]


def test_text_that_compresses_past_the_bound_and_words_without_spaces(tokenizer):
    # one repeated token: far more characters a token than the bound, so the tail alone is too short
    repeated = "go to fridge 1 | " * 3000
    no_spaces = "".join(random.Random(1).choice("abcdefgh0123") for _ in range(30_000))
    short = "Task: put the apple in the fridge.\nNow: you see a fridge 1.\nReply <action>...</action>"
    prompts = [repeated, no_spaces, short, no_spaces + " " + repeated]
    for budget in (8, 100, 512):
        assert chat_prompts_ids(tokenizer, prompts, budget) == [whole_prompt_ids(tokenizer, p, budget) for p in prompts]
