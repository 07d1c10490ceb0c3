"""rollout.generate_in_bf16's weights (agentrl/models/bf16_weights.py): bf16 parameters while generating, then the
trained model's own fp32 tensors back, untouched."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agentrl.models.bf16_weights import weights_in_bf16


def _model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def test_the_parameters_are_bf16_inside_and_the_same_fp32_tensors_after():
    model = _model().train()
    ids = torch.randint(0, 97, (3, 20))
    model(input_ids=ids, labels=ids).loss.backward()  # gradients, as the trained model has between updates
    optimizer = torch.optim.AdamW(model.parameters())
    before = {name: (p, p.data_ptr(), p.data.clone(), p.grad.clone()) for name, p in model.named_parameters()}
    buffers = {name: b.dtype for name, b in model.named_buffers()}

    with weights_in_bf16(model) as inside:
        assert inside is model
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
        for name, p in model.named_parameters():
            assert torch.equal(p.data, before[name][2].to(torch.bfloat16)), name
        assert model.lm_head.weight is model.model.embed_tokens.weight  # tied weights stay one parameter
        assert {name: b.dtype for name, b in model.named_buffers()} == buffers  # rotary frequencies stay fp32
        with torch.no_grad():
            model(input_ids=ids)  # generation-style use runs

    for name, p in model.named_parameters():
        param, storage, values, grad = before[name]  # the same parameter, on its own fp32 storage, unchanged
        assert p is param and p.data_ptr() == storage and torch.equal(p, values) and torch.equal(p.grad, grad), name
    assert optimizer.param_groups[0]["params"][0] is model.model.embed_tokens.weight


def test_the_fp32_weights_come_back_when_generation_fails():
    model = _model()
    with pytest.raises(RuntimeError, match="a stop"), weights_in_bf16(model):
        raise RuntimeError("a stop during the rollout")
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_bf16_weights_give_autocasts_log_probs_within_bf16s_rounding():
    model = _model().eval()
    ids = torch.randint(0, 97, (4, 24))
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = model(input_ids=ids).logits.float().log_softmax(-1)
        fp32 = model(input_ids=ids).logits.log_softmax(-1)
        with weights_in_bf16(model):
            rounded = model(input_ids=ids).logits.float().log_softmax(-1)
        model.model.layers[0].mlp.down_proj.weight.mul_(3.0)  # other weights
        with weights_in_bf16(model):
            other = model(input_ids=ids).logits.float().log_softmax(-1)
    # bf16 keeps 8 bits of mantissa; bf16 weights also round the norms and the residual stream, which autocast keeps
    # in fp32. Measured on this model: at most 0.0077 from autocast's log-probs (about -4.6) and 0.0045 from fp32's.
    # The bound leaves room for another CPU's kernels, not for other weights (one layer scaled: 0.17).
    assert (rounded - autocast).abs().max() < 0.05
    assert (rounded - fp32).abs().max() < 0.05
    assert (other - autocast).abs().max() > 0.1
