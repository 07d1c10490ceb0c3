"""HF generation's behaviour log-probs, taken step by step (`generate_with_logprobs`), are bit for bit those of the
way they were taken before: `output_scores=True`, every step's processed scores kept to the end of the call, then
the log-softmax of each step gathered at its sampled token. `old_way` below is that code as it was, kept as the
reference: same seed, same tokens, `torch.equal` log-probs, for greedy and sampled generation, several batch sizes,
sequences ending at different lengths and an interrupted call."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, StoppingCriteria, StoppingCriteriaList

from agentrl.models.tiny import build_tokenizer
from agentrl.rollout.collector import Turn
from agentrl.rollout.policies import HFPolicy, SamplingSpec, generate_with_logprobs

VOCAB = 300
MAX_NEW = 12
# a third of the vocabulary ends a sequence: the random model's replies end at many different lengths
EOS = list(range(3, VOCAB, 3))
PAD = 0


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    net = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            eos_token_id=EOS[0],
            pad_token_id=PAD,
        )
    )
    return net.eval()


def _interrupt_after(calls: int):
    """An interrupt that fires on its `calls`-th query (the policy's stopping criterion asks once per token)."""
    asked = [0]

    def interrupt() -> bool:
        asked[0] += 1
        return asked[0] >= calls

    return interrupt


def old_way(model, input_ids, attention_mask, s: SamplingSpec, interrupt=None, pad_token_id=PAD):
    """agentrl/rollout/policies.py's HFPolicy.act, `_when` and `_sampled_logprobs` before the change, verbatim but
    for the names: (B, T) ids and their (B, T) log-probs."""
    criteria = None
    if interrupt is not None:

        class Interrupted(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                return torch.full((input_ids.shape[0],), interrupt(), dtype=torch.bool, device=input_ids.device)

        criteria = StoppingCriteriaList([Interrupted()])
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        do_sample=not s.greedy,
        temperature=None if s.greedy else s.temperature,
        top_p=None if s.greedy else s.top_p,
        top_k=None,
        repetition_penalty=1.0,
        max_new_tokens=s.max_new_tokens,
        eos_token_id=EOS,
        pad_token_id=pad_token_id,
        output_scores=True,
        return_dict_in_generate=True,
        stopping_criteria=criteria,
    )
    sampled = out.sequences[:, input_ids.shape[1] :]
    steps = [
        step.float().log_softmax(-1).gather(-1, sampled[:, t : t + 1]).squeeze(-1) for t, step in enumerate(out.scores)
    ]
    return sampled, torch.stack(steps, dim=1).cpu()


def _prompts(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts of different lengths, as HFPolicy.act builds them."""
    g = torch.Generator().manual_seed(seed)
    lengths = [int(n) for n in torch.randint(2, 9, (batch,), generator=g)]
    width = max(lengths)
    ids = torch.full((batch, width), PAD, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, width - n :] = torch.randint(1, VOCAB, (n,), generator=g)
        mask[i, width - n :] = 1
    return ids, mask


def _ends(sampled: torch.Tensor) -> list[int]:
    """Each row's length up to and including its first end token."""
    ends = []
    for row in sampled.tolist():
        ends.append(next((pos + 1 for pos, tok in enumerate(row) if tok in EOS), len(row)))
    return ends


SPECS = {
    "greedy": SamplingSpec(greedy=True, max_new_tokens=MAX_NEW),
    "sampled": SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=MAX_NEW),
    "temperature and top-p": SamplingSpec(temperature=0.7, top_p=0.9, max_new_tokens=MAX_NEW),
}


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("spec", list(SPECS))
def test_step_by_step_logprobs_equal_the_kept_scores_to_the_bit(model, spec, batch):
    s = SPECS[spec]
    ends = []
    for seed in range(3):
        ids, mask = _prompts(batch, seed)
        torch.manual_seed(seed)
        old_ids, old_logprobs = old_way(model, ids, mask, s)
        torch.manual_seed(seed)
        new_ids, new_logprobs = generate_with_logprobs(model, ids, mask, s, eos_token_ids=EOS, pad_token_id=PAD)
        assert torch.equal(new_ids, old_ids)
        # the whole (B, T) tensor, the padding after each sequence's end included
        assert new_logprobs.dtype == torch.float32 and torch.equal(new_logprobs, old_logprobs)
        # up to each sequence's end, a sampled token's (after it, top-p may have cut the padding: -inf, as before)
        for row, end in zip(new_logprobs, _ends(new_ids)):
            assert torch.isfinite(row[:end]).all() and (row[:end] <= 0).all()
        ends += _ends(new_ids)
    if batch > 1:
        assert len(set(ends)) > 2, ends  # sequences ended at different lengths, some before max_new_tokens
        assert min(ends) < MAX_NEW


@pytest.mark.parametrize("spec", list(SPECS))
def test_an_interrupted_call_keeps_the_last_tokens_logprob(model, spec):
    s = SPECS[spec]
    ids, mask = _prompts(4, seed=7)
    torch.manual_seed(1)
    old_ids, old_logprobs = old_way(model, ids, mask, s, interrupt=_interrupt_after(3))
    torch.manual_seed(1)
    new_ids, new_logprobs = generate_with_logprobs(
        model, ids, mask, s, eos_token_ids=EOS, pad_token_id=PAD, interrupt=_interrupt_after(3)
    )
    assert new_ids.shape[1] <= 3  # the interrupt ended the call at the third token (or every row ended before)
    assert torch.equal(new_ids, old_ids) and torch.equal(new_logprobs, old_logprobs)


def test_the_policys_replies_carry_the_reference_logprobs_and_generate_keeps_no_scores(model, monkeypatch):
    tokenizer = build_tokenizer(["<action>go to fridge 1</action> You arrive at countertop 1."] * 50, vocab_size=VOCAB)
    assert len(tokenizer) <= VOCAB
    s = SamplingSpec(temperature=0.7, top_p=0.9, max_new_tokens=MAX_NEW)
    policy = HFPolicy(model, tokenizer, s, eos_token_ids=EOS)
    asked = []
    generate = model.generate

    def spy(*args, **kwargs):
        asked.append(kwargs)
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    turns = [Turn(prompt=p, observation=None) for p in ("go to fridge 1", "look", "go to countertop 1 " * 3)]
    torch.manual_seed(3)
    replies = policy.act(turns)
    [kwargs] = asked
    assert not kwargs["output_scores"] and not kwargs["return_dict_in_generate"]
    # the reference on the same left-padded batch, from the same seed
    torch.manual_seed(3)
    old_ids, old_logprobs = old_way(model, kwargs["input_ids"], kwargs["attention_mask"], s, pad_token_id=policy.pad_id)
    for i, reply in enumerate(replies):
        n = len(reply.completion_ids)
        assert reply.completion_ids == old_ids[i, :n].tolist()
        assert torch.equal(torch.tensor(reply.logprobs, dtype=torch.float32), old_logprobs[i, :n])
