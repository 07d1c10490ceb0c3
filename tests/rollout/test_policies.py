"""HF generation policy: behaviour log-probs are those of the sampled tokens; a turn's prompts are tokenized in one
batch, to the ids each would have on its own."""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agentrl.envs.household import HouseholdSuite
from agentrl.models.tiny import build_tokenizer
from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.policies import HFPolicy, SamplingSpec, chat_prompts_ids


def test_behaviour_logprobs_match_a_forward_pass():
    suite = HouseholdSuite("easy")
    tokenizer = build_tokenizer(["<action>go to fridge 1</action> You arrive at countertop 1."] * 50, vocab_size=300)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    policy = HFPolicy(model, tokenizer, SamplingSpec(temperature=1.0, max_new_tokens=6))
    batch = collect(suite, [suite.task("train", 0)], 3, policy, PromptSpec("compact", 2), max_steps=1)
    for prompt, completion, logprobs in zip(batch.prompt_ids, batch.completion_ids, batch.logprobs):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)
        assert len(logprobs) == len(completion)
        assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4)


def test_a_turns_prompts_in_one_batch_have_the_ids_of_one_call_each():
    tokenizer = build_tokenizer(["<action>go to fridge 1</action> You arrive at countertop 1."] * 50, vocab_size=300)
    suite = HouseholdSuite("easy")
    prompts = [suite.make_env().reset(suite.task("train", i)).text for i in range(3)]
    prompts += ["", "go to fridge 1 " * 40]  # an empty prompt, and one longer than the budget: cut at its start
    for budget in (7, 2048):
        one_call_each = [
            tokenizer(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
                ),
                add_special_tokens=False,
            )["input_ids"][-budget:]
            for prompt in prompts
        ]
        assert chat_prompts_ids(tokenizer, prompts, budget) == one_call_each
    assert all(len(ids) == 7 for ids in chat_prompts_ids(tokenizer, prompts, 7))
    assert chat_prompts_ids(tokenizer, [], 7) == []
