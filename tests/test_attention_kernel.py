"""model.attn_implementation: transformers' attention kernel reaches the loaded model, and eager attention computes
what SDPA does (the same log-probs and gradients within floating-point order) on left-padded rows."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM

from agentrl.models.load import load_model, load_policy
from agentrl.models.lora import load_checkpoint
from agentrl.models.tiny import build_tokenizer

VOCAB = 97


def _saved_model(folder) -> str:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query, as SmolLM2 (9 heads, 3 key/value heads)
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return str(folder)


def _left_padded_rows() -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of 24, 17 and 9 tokens, left-padded to 24 as HF generation batches a turn's prompts."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (3, 24), generator=generator)
    mask = torch.ones_like(ids)
    for row, length in enumerate((24, 17, 9)):
        mask[row, : 24 - length] = 0
    return ids, mask


def _scored(logps: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each real token's log-prob given the real tokens before it (a padding position predicts nothing: its query
    sees no key, and the kernels may fill that row differently)."""
    return logps[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1) * mask[:, :-1] * mask[:, 1:]


def _logps_and_grads(model, ids, mask) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    logps = model(input_ids=ids, attention_mask=mask).logits.float().log_softmax(-1)
    taken = _scored(logps, ids, mask)
    taken.sum().backward()
    return taken.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def test_the_kernel_reaches_the_model_and_defaults_to_transformers_choice(tmp_path):
    source = _saved_model(tmp_path / "model")
    assert load_model(source, attention="eager").config._attn_implementation == "eager"
    assert load_model(source).config._attn_implementation == "sdpa"
    model_cfg = OmegaConf.create({"name": "m", "path": source, "tiny": None, "attn_implementation": "eager"})
    hardware = OmegaConf.create({"device": "cpu", "precision": "fp32"})
    build_tokenizer(["go to fridge 1", "open drawer 2"], vocab_size=300).save_pretrained(source)
    model, _ = load_policy(model_cfg, OmegaConf.create({}), hardware)
    assert model.config._attn_implementation == "eager"
    # a checkpoint's evaluation loads it with the kernel its run trained with
    model, _ = load_checkpoint(source, attention="eager")
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16 autocast"])
def test_eager_attention_gives_sdpas_log_probs_and_gradients(tmp_path, autocast):
    source = _saved_model(tmp_path / "model")
    ids, mask = _left_padded_rows()
    results = {}
    for kernel in ("sdpa", "eager"):
        model = load_model(source, attention=kernel).train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            results[kernel] = _logps_and_grads(model, ids, mask)
    (sdpa_logps, sdpa_grads), (eager_logps, eager_grads) = results["sdpa"], results["eager"]
    # fp32: the same sums in another order; measured 4.8e-7 apart (log-probs) and 5.3e-7 (gradients, relative to each
    # parameter's largest). bf16 autocast rounds each matmul's inputs to 8 bits of mantissa, and the kernels round
    # different intermediates (eager the scores' matmul output, SDPA inside its kernel): measured 0.0037 and 0.011,
    # bounded by bf16's rounding of log-probs near -4.6 (as in test_bf16_weights). A kernel that dropped the padding
    # mask moves them by 0.23 or more (the last assertion).
    tolerance = 0.05 if autocast else 1e-4
    assert (eager_logps - sdpa_logps).abs().max() < tolerance
    for name, grad in sdpa_grads.items():
        scale = grad.abs().max().clamp_min(1e-6)
        assert ((eager_grads[name] - grad).abs().max() / scale) < tolerance, name
    # the comparison can fail: without the padding mask the left-padded rows' log-probs move
    with torch.no_grad():
        unmasked = load_model(source, attention="eager")(input_ids=ids).logits.float().log_softmax(-1)
    assert (_scored(unmasked, ids, mask) - sdpa_logps).abs().max() > 4 * tolerance
