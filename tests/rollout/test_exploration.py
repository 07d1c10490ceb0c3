"""The warm start's spread over the admissible actions (agentrl/rollout/exploration.py): the cached-prompt scores
are the plain forward's, the spread is 1 for a uniform choice and 0 for a sure one, and the probe plays as the
policy it wraps."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.envs.base import Observation
from agentrl.models.tiny import build_tokenizer
from agentrl.rollout.collector import Reply, Turn
from agentrl.rollout.exploration import AdmissibleProbe, admissible_spread, reply_logprobs
from agentrl.rollout.parsing import format_reply
from agentrl.rollout.policies import chat_prompt_ids
from tests.test_supervised import _model

PROMPT = "You are in the kitchen. You see a fridge 1 and a table 1. Actions: go to fridge 1, take apple from table 1"
ACTIONS = ["go to fridge 1", "take apple from table 1", "open fridge 1", "look"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer([PROMPT, *map(format_reply, ACTIONS)] * 8, 400)


@pytest.fixture(scope="module")
def model(tokenizer):
    return _model(tokenizer).eval()  # the small Qwen2 of the supervised tests


def plain_logprob(model, tokenizer, prompt: str, reply: str) -> float:
    """log p(reply, end token | prompt) from one forward over the whole sequence, without a cache."""
    prompt_ids = chat_prompt_ids(tokenizer, prompt, 2048)
    reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt_ids + reply_ids])
    with torch.no_grad():
        logps = model(ids).logits[0, :-1].double().log_softmax(-1)
    targets = ids[0, 1:]
    picked = logps.gather(-1, targets[:, None])[:, 0]
    return picked[len(prompt_ids) - 1 :].sum().item()


def test_cached_scores_equal_a_plain_forward_for_replies_of_different_lengths(model, tokenizer):
    replies = [format_reply(a) for a in ACTIONS]
    lengths = {len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in replies}
    assert len(lengths) > 1  # the batch is padded: the check covers the padding
    scored = reply_logprobs(model, tokenizer, PROMPT, replies, 2048)
    expected = torch.tensor([plain_logprob(model, tokenizer, PROMPT, r) for r in replies], dtype=torch.float64)
    assert torch.allclose(scored, expected, atol=1e-4), (scored, expected)


def test_spread_is_one_for_a_uniform_choice_and_zero_for_a_sure_one():
    uniform = torch.full((5,), math.log(0.1), dtype=torch.float64)
    entropy, mass = admissible_spread(uniform)
    assert entropy == pytest.approx(1.0) and mass == pytest.approx(0.5)
    sure = torch.tensor([0.0, -60.0, -60.0], dtype=torch.float64)
    entropy, mass = admissible_spread(sure)
    assert entropy == pytest.approx(0.0, abs=1e-20) and mass == pytest.approx(1.0)
    two_to_one = torch.tensor([math.log(2 / 3), math.log(1 / 3)], dtype=torch.float64)
    assert admissible_spread(two_to_one)[0] == pytest.approx((math.log(3) - 2 / 3 * math.log(2)) / math.log(2))


class Fixed:
    def act(self, turns):
        return [Reply(text=format_reply("look")) for _ in turns]


def test_probe_plays_as_its_policy_and_skips_turns_without_a_choice(model, tokenizer):
    probe = AdmissibleProbe(Fixed(), model, tokenizer)
    turns = [
        Turn(prompt=PROMPT, observation=Observation(text="x", admissible_actions=ACTIONS, task_description="t")),
        Turn(prompt=PROMPT, observation=Observation(text="x", admissible_actions=["look"], task_description="t")),
    ]
    assert [r.text for r in probe.act(turns)] == [format_reply("look")] * 2
    summary = probe.summary()
    assert len(probe.entropies) == 1 and 0.0 < summary["admissible_entropy"] <= 1.0
    assert 0.0 < summary["admissible_mass"] <= 1.0
    assert math.isnan(AdmissibleProbe(Fixed(), model, tokenizer).summary()["admissible_entropy"])
