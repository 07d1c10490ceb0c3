"""verl-agent's update schedule, in-process on the real trainer: mini-batches, epochs, old log-probs, the clip.

- With two mini-batches, the old log-probs are the generating policy's for both; the first step's ratio is
  exactly 1, the second's is not, and the clip binds exactly where rho and the sign of A say it must.
- Micro-batches change nothing: one iteration of several steps lands on the same weights whether each
  mini-batch is one micro-batch or several (by rows, or packed to a token budget, which also cuts the old
  log-probs' pass), for token-mean and seq-mean.
- The loss is TRL's GRPO loss with verl's KL gradient: where neither clamp nor dual clip binds, it equals
  TRL's `_compute_loss` with `use_bias_correction_kl=False`, value and gradient.
"""

from __future__ import annotations

import copy

import pytest
import torch
from trl import GRPOTrainer

from agentrl.config.values import LossAggregation
from agentrl.train import trainer as trainer_module
from tests.train.conftest import make_batch

pytestmark = pytest.mark.slow

ADVANTAGES = [1.0, -1.0, -0.5, 2.0]
LENGTHS = [3, 2, 4, 3]


def one_iteration(trainer, batch, monkeypatch, *, lr: float, optimizer=torch.optim.AdamW) -> dict:
    """`training_step` on a prepared batch with a fresh optimizer; returns the iteration's metrics."""
    trainer.optimizer = optimizer(trainer.model.parameters(), lr=lr)
    trainer.iteration_metrics = {}
    monkeypatch.setattr(trainer, "_generate_and_score_completions", lambda inputs: batch)
    trainer.training_step(trainer.model, None)
    return trainer.iteration_metrics


def test_the_second_mini_batch_is_off_policy_and_clipped_where_the_numbers_say(restored, monkeypatch):
    trainer = restored
    monkeypatch.setattr(trainer, "beta", 0.0)
    monkeypatch.setattr(trainer.cfg.trainer, "mini_batch_size", 2)
    batch = make_batch(trainer, ADVANTAGES, LENGTHS, seed=3)
    generating = trainer._logps_of(trainer.model, batch).detach()  # the policy before any step
    trainer._add_policy_logps(batch)
    assert torch.equal(batch["old_per_token_logps"], generating)

    calls = []
    real = trainer_module.ppo_clip_loss

    def recording(logps, old, advantages, *args, **kwargs):
        out = real(logps, old, advantages, *args, **kwargs)
        calls.append((logps.detach(), old, advantages, out))
        return out

    monkeypatch.setattr(trainer_module, "ppo_clip_loss", recording)
    metrics = one_iteration(trainer, batch, monkeypatch, lr=0.05)
    assert metrics["train/optimizer_steps"] == 2
    assert len(calls) == 2  # one micro-batch per mini-batch

    first, second = calls  # each micro-batch is trimmed to the columns its rows use
    mask = batch["completion_mask"].bool()
    width = first[3].ratio.size(1)
    assert torch.allclose(first[3].ratio[mask[:2, :width]], torch.ones(()), atol=1e-6)  # before any step: rho = 1
    width = second[3].ratio.size(1)
    assert torch.equal(second[1], generating[2:, :width])  # the old log-probs stay the generating policy's

    ratio, advantage = second[3].ratio, second[2].unsqueeze(1)
    m = mask[2:, :width]
    assert (ratio[m] - 1).abs().max() > 0.2  # the first step moved the policy past the clip range
    # the clip binds where A > 0 and rho > 1 + eps, or A < 0 and rho < 1 - eps (eps = 0.2), and only there
    must_bind = ((advantage > 0) & (ratio > 1.2)) | ((advantage < 0) & (ratio < 0.8))
    assert torch.equal(second[3].clipped[m], must_bind[m])
    assert must_bind[m].any()
    assert 0 < metrics["train/clip_ratio"] < 1


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_micro_batches_do_not_change_the_steps(restored, aggregation, monkeypatch):
    trainer = restored
    monkeypatch.setattr(trainer, "beta", 0.0)
    monkeypatch.setattr(trainer.cfg.algo, "loss_aggregation", LossAggregation(aggregation))
    monkeypatch.setattr(trainer.cfg.trainer, "mini_batch_size", 2)
    monkeypatch.setattr(trainer.cfg.trainer, "epochs", 2)
    start = copy.deepcopy(trainer.model.state_dict())
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    weights = {}
    # rows of 5 prompt tokens and 3, 2, 4, 3 completion tokens: a budget of 16 pairs rows 0 and 1 and splits 2 and 3
    for micro, tokens in ((2, None), (1, None), (2, 16), (2, 1)):
        trainer.model.load_state_dict(start)
        monkeypatch.setattr(trainer.cfg.trainer, "micro_batch_size", micro)
        monkeypatch.setattr(trainer.cfg.trainer, "micro_batch_tokens", tokens)
        batch = make_batch(trainer, ADVANTAGES, LENGTHS, seed=4)
        trainer._add_policy_logps(batch)
        # plain SGD: the weights are linear in the gradients (Adam would amplify float noise in near-zero ones)
        steps = one_iteration(trainer, batch, monkeypatch, lr=0.5, optimizer=torch.optim.SGD)
        assert steps["train/optimizer_steps"] == 4
        weights[micro, tokens] = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    whole = weights[2, None]
    assert not torch.allclose(whole, before)
    assert torch.allclose(weights[1, None], whole, atol=1e-6, rtol=1e-5)
    assert torch.allclose(weights[2, 16], whole, atol=1e-6, rtol=1e-5)
    assert torch.allclose(weights[2, 1], whole, atol=1e-6, rtol=1e-5)


def test_the_loss_is_trls_with_verls_kl_gradient(trainer, monkeypatch):
    monkeypatch.setattr(trainer, "beta", 0.05)
    monkeypatch.setattr(trainer.args, "use_bias_correction_kl", False)  # TRL's default weights the KL by rho
    batch = make_batch(trainer, ADVANTAGES, LENGTHS, seed=5)
    with torch.no_grad():
        batch["ref_per_token_logps"] = trainer._logps_of(trainer.model, batch) - 0.3  # KL > 0, below the clamp

    def value_and_gradient(compute):
        trainer.model.zero_grad(set_to_none=True)
        loss = compute(trainer.model, batch)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
        trainer.model.zero_grad(set_to_none=True)
        return loss.item(), grads

    ours, our_grad = value_and_gradient(trainer._compute_loss)
    trls, trl_grad = value_and_gradient(lambda model, inputs: GRPOTrainer._compute_loss(trainer, model, inputs))
    assert ours == pytest.approx(trls, abs=1e-7)
    assert torch.allclose(our_grad, trl_grad, atol=1e-6)
