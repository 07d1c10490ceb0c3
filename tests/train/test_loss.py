"""The loss path in-process, on the real trainer and the tiny model, against numbers worked out by hand.

- Micro-batches change nothing: for every loss aggregation offered, the loss and the gradient of an
  iteration split into micro-batches (by rows, or packed to a token budget) equal those of the iteration in
  one piece.
- The values are the aggregation's formula: with the PPO ratio at 1 and no KL, the per-token loss is
  -A_i, so token-mean is -sum_i A_i n_i / sum_i n_i and seq-mean is -mean_i A_i.
- The sign of the advantage reaches the gradient: one step raises the log-probability of a completion
  with a positive advantage and lowers it for a negative one.
- The entropy term adds exactly its formula, -coef * sum_i w_i (mean_t H_it), with H computed here
  from the logits.
"""

from __future__ import annotations

import copy

import pytest
import torch

from agentrl.algos.entropy import EntropyRegularizer
from agentrl.config.values import LossAggregation
from agentrl.train.batching import micro_batch_bounds, micro_batches, row_slices
from tests.train.conftest import make_batch

pytestmark = pytest.mark.slow  # builds the +debug=fast tiny model once (seconds)

AGGREGATIONS = ["token_mean", "seq_mean"]


ADVANTAGES = [1.5, -0.5, 0.25, -2.0, 1.0]
LENGTHS = [3, 1, 4, 2, 4]


def loss_and_gradient(trainer, batch, micro_batch_size, micro_batch_tokens=None):
    model = trainer.model
    model.zero_grad(set_to_none=True)
    total = torch.zeros(())
    if micro_batch_tokens is None:
        micros = list(micro_batches(batch, micro_batch_size))
    else:
        micros = list(row_slices(batch, micro_batch_bounds(batch, micro_batch_size, micro_batch_tokens)))
        assert len(micros) > 1  # the budget does split this batch
    for micro in micros:
        loss = trainer._compute_loss(model, micro)
        loss.backward()
        total += loss.detach()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return total, grads


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("micro_batch_size", [1, 2, 3])
def test_micro_batches_give_the_whole_batch_loss_and_gradient(trainer, aggregation, micro_batch_size, monkeypatch):
    monkeypatch.setattr(trainer.cfg.algo, "loss_aggregation", LossAggregation(aggregation))
    monkeypatch.setattr(trainer, "beta", 0.0)
    batch = make_batch(trainer, ADVANTAGES, LENGTHS)
    whole_loss, whole_grad = loss_and_gradient(trainer, batch, micro_batch_size=len(ADVANTAGES))
    split_loss, split_grad = loss_and_gradient(trainer, batch, micro_batch_size=micro_batch_size)
    assert split_loss.item() == pytest.approx(whole_loss.item(), abs=1e-6)
    assert torch.allclose(split_grad, whole_grad, atol=1e-6, rtol=1e-4)
    assert whole_grad.abs().sum() > 0


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("micro_batch_tokens", [1, 16, 20, 30])
def test_token_budgets_give_the_whole_batch_loss_and_gradient(trainer, aggregation, micro_batch_tokens, monkeypatch):
    """Prompts of 5 tokens, completions of 3, 1, 4, 2, 4: budget 1 puts every row alone (each is longer), 16 packs
    2, 1, 1, 1 rows, 20 packs 2, 2, 1 and 30 packs 3, 2: micro-batches of unequal sizes."""
    monkeypatch.setattr(trainer.cfg.algo, "loss_aggregation", LossAggregation(aggregation))
    monkeypatch.setattr(trainer, "beta", 0.0)
    batch = make_batch(trainer, ADVANTAGES, LENGTHS)
    whole_loss, whole_grad = loss_and_gradient(trainer, batch, micro_batch_size=len(ADVANTAGES))
    split_loss, split_grad = loss_and_gradient(trainer, batch, len(ADVANTAGES), micro_batch_tokens)
    assert split_loss.item() == pytest.approx(whole_loss.item(), abs=1e-6)
    assert torch.allclose(split_grad, whole_grad, atol=1e-6, rtol=1e-4)
    assert whole_grad.abs().sum() > 0


def test_the_values_are_the_aggregations_formulas(trainer, monkeypatch):
    monkeypatch.setattr(trainer, "beta", 0.0)
    batch = make_batch(trainer, ADVANTAGES, LENGTHS)
    monkeypatch.setattr(trainer.cfg.algo, "loss_aggregation", LossAggregation("token_mean"))
    token_mean = -sum(a * n for a, n in zip(ADVANTAGES, LENGTHS)) / sum(LENGTHS)  # -(1.5*3 - .5 + 1 - 4 + 4)/14
    assert loss_and_gradient(trainer, batch, 2)[0].item() == pytest.approx(token_mean, abs=1e-6)
    monkeypatch.setattr(trainer.cfg.algo, "loss_aggregation", LossAggregation("seq_mean"))
    seq_mean = -sum(ADVANTAGES) / len(ADVANTAGES)  # -0.25 / 5
    assert loss_and_gradient(trainer, batch, 2)[0].item() == pytest.approx(seq_mean, abs=1e-6)


def completion_logp(model, trainer, batch) -> float:
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, batch["completion_ids"].size(1))
    return float((logps * batch["completion_mask"]).sum())


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_the_sign_of_the_advantage_moves_the_log_probability(trainer, advantage, monkeypatch):
    monkeypatch.setattr(trainer, "beta", 0.0)
    batch = make_batch(trainer, [advantage], [3], seed=1)
    original = trainer.model
    model = copy.deepcopy(original)
    monkeypatch.setattr(trainer, "model", model)
    before = completion_logp(model, trainer, batch)
    trainer._compute_loss(model, batch).backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                # one small plain gradient step: the claim is first-order. On the tiny model warmed up by
                # SFTTrainer these completions sit near log-prob -20, where a step of 1e-2 overshot for the
                # negative advantage (-20.6 -> -20.1); at 1e-4 each sign moves the sum by about 0.34
                p -= 1e-4 * p.grad
    after = completion_logp(model, trainer, batch)
    assert (after - before) * advantage > 0, (before, after)


def test_the_entropy_term_adds_exactly_its_formula(trainer, monkeypatch):
    monkeypatch.setattr(trainer, "beta", 0.0)
    monkeypatch.setattr(trainer.cfg.algo, "loss_aggregation", LossAggregation("token_mean"))
    batch = make_batch(trainer, ADVANTAGES, LENGTHS)
    weights = torch.tensor([0.1, 0.3, 0.2, 0.25, 0.15])
    batch["entropy_row_weight"] = weights
    monkeypatch.setattr(trainer, "entropy_reg", None)
    without = trainer._compute_loss(trainer.model, batch).item()
    coef = 0.05
    monkeypatch.setattr(trainer, "entropy_reg", EntropyRegularizer("bonus", coef=coef, total_iterations=10))
    with_term = trainer._compute_loss(trainer.model, batch).item()

    # the entropy of the sampling distribution (logits / temperature) at each completion position
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logits = trainer.model(input_ids=ids, attention_mask=mask).logits.float()
    width = batch["completion_ids"].size(1)
    logits = logits[:, -width - 1 : -1] / trainer.temperature
    entropy = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    m = batch["completion_mask"]
    row_mean = (entropy * m).sum(-1) / m.sum(-1)
    expected = -coef * float((weights * row_mean).sum())
    assert with_term - without == pytest.approx(expected, abs=1e-6)
    assert expected != 0


def test_rows_generated_ahead_take_the_behaviour_weight_instead_of_trls_vllm_ratio(trainer, monkeypatch):
    """With vLLM's correction on, rows of the synchronous loop are multiplied by TRL's vLLM ratio; rows generated
    ahead (rollout.max_staleness >= 1) by decoupled PPO's behaviour weight alone, which already corrects from the
    sampler to the proximal policy (docs/algorithms.md, "Off-policy correction")."""
    monkeypatch.setattr(trainer, "beta", 0.0)
    monkeypatch.setattr(trainer, "use_vllm", True)
    monkeypatch.setattr(trainer, "vllm_importance_sampling_correction", True)
    batch = make_batch(trainer, ADVANTAGES, LENGTHS)
    rows = len(ADVANTAGES)
    batch["importance_sampling_ratio"] = torch.ones(rows, 1)
    on_policy = trainer._compute_loss(trainer.model, batch).item()
    batch["importance_sampling_ratio"] = torch.full((rows, 1), 2.0)
    assert trainer._compute_loss(trainer.model, batch).item() == pytest.approx(2 * on_policy, rel=1e-5)

    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        proximal, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, batch["completion_ids"].size(1)
        )
    batch["behaviour_per_token_logps"] = proximal + torch.log(torch.tensor(2.0))  # weight pi_prox / pi_behav = 1/2
    ahead = trainer._compute_loss(trainer.model, batch).item()
    assert ahead == pytest.approx(0.5 * on_policy, rel=1e-4)  # the behaviour weight, and not the ratio of 2
    assert on_policy != 0
