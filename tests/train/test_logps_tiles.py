"""The log-probabilities and entropies of the loss come from TRL 1.16's fused LM head (`_token_logps`): the
backbone once, then the head in tiles of positions, never the whole [rows x completion tokens x vocabulary]
logits with their log-softmax copy. Checked against the plain computation from full logits, values and
gradients, on a micro-batch of more completion positions than one tile holds."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from agentrl.memory.plan import TOKEN_TILE

ROWS, PROMPT, COMPLETION = 8, 24, 600  # 4,800 completion positions: more than one tile of TOKEN_TILE


class LargestVocabTensor(TorchDispatchMode):
    """Records the largest tensor whose last dimension is the vocabulary, among every op's outputs."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.largest = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == self.vocab:
                self.largest = max(self.largest, t.numel())
        return out


def _batch(vocab: int):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (ROWS, PROMPT + COMPLETION), generator=generator)
    attention = torch.ones_like(ids)
    attention[1, :5] = 0  # left padding in one row, as a batch of prompts has
    attention[2, -40:] = 0  # a shorter completion
    return ids, attention


def _plain(model, ids, attention):
    """Log-probabilities and entropies from the full logits (what the fused head must equal)."""
    logits = model(input_ids=ids, attention_mask=attention, fused_lm_head=False).logits
    logits = logits[:, PROMPT - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    token_logp = logp.gather(-1, ids[:, PROMPT:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return token_logp, entropy


def _grads(model, loss):
    model.zero_grad()
    loss.backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def test_tiled_log_probs_and_entropies_equal_the_full_logits_and_never_hold_them(trainer):
    model = trainer.model
    vocab = model.config.vocab_size
    ids, attention = _batch(vocab)
    weights = torch.linspace(-1, 1, COMPLETION)  # any loss that depends on every position

    recorder = LargestVocabTensor(vocab)
    with recorder:
        logps, entropies = trainer._token_logps(model, ids, attention, COMPLETION, entropies=True)
    assert ROWS * COMPLETION > TOKEN_TILE
    assert recorder.largest <= TOKEN_TILE * vocab < ROWS * COMPLETION * vocab, (
        f"a tensor of {recorder.largest} vocabulary values: the full logits are {ROWS * COMPLETION * vocab}"
    )
    tiled = _grads(model, (logps * weights).sum() + (entropies * weights).sum())

    plain_logps, plain_entropies = _plain(model, ids, attention)
    keep = attention[:, PROMPT:].bool()
    # within 1e-6 relative (log-probabilities of random tokens are about -6; fp32 sums in another order)
    torch.testing.assert_close(logps[keep], plain_logps[keep], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(entropies[keep], plain_entropies[keep], rtol=1e-6, atol=1e-6)
    plain = _grads(model, (plain_logps * weights * keep).sum() + (plain_entropies * weights * keep).sum())
    assert tiled.keys() == plain.keys()
    for name in plain:
        # within 1e-5 of the gradient's largest entry: each entry sums 4,800 positions' terms in fp32, in another
        # order in the tiles (measured: at most 2.0e-6 of the largest entry; entries reach about 150)
        scale = max(plain[name].abs().max().item(), 1.0)
        torch.testing.assert_close(tiled[name], plain[name], rtol=0, atol=1e-5 * scale, msg=name)
    model.zero_grad()


def test_on_a_cpu_the_head_projects_the_completions_positions_only(trainer):
    """TRL projects every position where it has no Triton; agentrl/fused_head.py makes it take its compact
    path on a CPU too, so a row's prompt is not projected through the vocabulary (docs/architecture.md)."""
    model = trainer.model
    vocab = model.config.vocab_size
    rows, prompt, completion = 2, 300, 10
    ids = torch.randint(3, vocab, (rows, prompt + completion), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    recorder = LargestVocabTensor(vocab)
    with recorder:
        logps, _ = trainer._token_logps(model, ids, attention, completion)
    assert logps.shape == (rows, completion)
    # the largest: a tile of the completions' positions, or the head's weight seen transposed (hidden x vocabulary);
    # every position would be rows x 310
    assert 0 < recorder.largest <= max(rows * completion, model.config.hidden_size) * vocab, (
        f"{recorder.largest // vocab} positions projected; the completions hold {rows * completion}"
    )
