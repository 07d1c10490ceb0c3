"""`trainer.skip_rows_without_advantage`: the update leaves out the rows whose advantage is 0, and lands where it
would have landed with them.

- With no KL and no entropy term, one iteration of two optimizer steps (AdamW, so the old log-probs' pass runs)
  reaches the same weights with the rows left out as with them, while the forward passes see only the rows with an
  advantage (the loss's and the old log-probs' passes alike).
- A mini-batch none of whose rows has an advantage still takes its optimizer step (AdamW's step count and moments
  move on as they would have): the weights after the next mini-batch agree.
- With a KL or an entropy term a row without advantage still has a gradient, so every row is computed.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from agentrl.train import batching
from tests.train.conftest import make_batch

pytestmark = pytest.mark.slow

LENGTHS = [3, 2, 4, 3, 2, 3]


def iteration_weights(trainer, monkeypatch, advantages, optimizer, *, skip: bool):
    """One iteration from the current weights with a fresh `optimizer`: (the weights after it, the rows of every
    forward pass in order, its metrics)."""
    monkeypatch.setattr(trainer.cfg.trainer, "skip_rows_without_advantage", skip)
    rows_seen: list[int] = []
    real = type(trainer)._token_logps.__get__(trainer)  # the class's: an earlier call's wrapper would count too

    def counting(model, ids, *args, **kwargs):
        rows_seen.append(ids.size(0))
        return real(model, ids, *args, **kwargs)

    monkeypatch.setattr(trainer, "_token_logps", counting)
    batch = make_batch(trainer, advantages, LENGTHS, seed=6)
    trainer._add_policy_logps(batch)
    trainer.optimizer = optimizer(trainer.model.parameters())
    trainer.iteration_metrics = {}
    monkeypatch.setattr(trainer, "_generate_and_score_completions", lambda inputs: batch)
    trainer.training_step(trainer.model, None)
    weights = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    return weights, rows_seen, trainer.iteration_metrics


def weights_with_and_without_skipping(trainer, monkeypatch, advantages, optimizer):
    start = copy.deepcopy(trainer.model.state_dict())
    kept = iteration_weights(trainer, monkeypatch, advantages, optimizer, skip=False)
    trainer.model.load_state_dict(start)
    skipped = iteration_weights(trainer, monkeypatch, advantages, optimizer, skip=True)
    return kept, skipped


def test_rows_without_advantage_change_nothing_but_the_work(restored, monkeypatch):
    trainer = restored
    monkeypatch.setattr(trainer, "beta", 0.0)
    monkeypatch.setattr(trainer.cfg.trainer, "mini_batch_size", 3)
    monkeypatch.setattr(trainer.cfg.trainer, "micro_batch_size", 3)
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    advantages = [1.0, 0.0, -0.5, 0.0, 2.0, 1e-12]  # 1e-12: what a group of equal returns can leave after rounding
    # plain SGD: the weights are linear in the gradients (Adam would amplify float noise in near-zero ones)
    sgd = functools.partial(torch.optim.SGD, lr=0.5)
    (kept, kept_rows, kept_metrics), (skipped, skipped_rows, metrics) = weights_with_and_without_skipping(
        trainer, monkeypatch, advantages, sgd
    )
    assert kept_rows == [3, 3, 3, 3]  # the old log-probs' pass, then the loss's, over both mini-batches of 3
    assert skipped_rows == [3, 2, 1]  # rows 0, 2, 4 in the old log-probs' pass; then 0 and 2, and 4
    assert kept_metrics["train/optimizer_steps"] == metrics["train/optimizer_steps"] == 2
    assert metrics["train/rows_computed"] == pytest.approx(0.5)
    assert "train/rows_computed" not in kept_metrics
    assert not torch.allclose(kept, before)
    assert torch.allclose(skipped, kept, atol=1e-6, rtol=1e-5)


def test_a_mini_batch_without_advantage_still_takes_its_step(restored, monkeypatch):
    trainer = restored
    monkeypatch.setattr(trainer, "beta", 0.0)
    monkeypatch.setattr(trainer.cfg.trainer, "mini_batch_size", 3)
    monkeypatch.setattr(trainer.cfg.trainer, "micro_batch_size", 3)
    # the first mini-batch has no advantage: one of its rows still runs, so that AdamW steps on a zero gradient and
    # its bias correction for the second step is the same (skipping the step would move the weights further)
    # AdamW with weight decay: a skipped step would leave the weights undecayed and the second step's bias
    # correction at step 1. The zero gradient is exact both ways and the second mini-batch the same rows, so the
    # weights are equal
    adamw = functools.partial(torch.optim.AdamW, lr=0.01, weight_decay=0.1)
    (kept, _, _), (skipped, rows, metrics) = weights_with_and_without_skipping(
        trainer, monkeypatch, [0.0, 0.0, 0.0, 1.0, -1.0, 0.5], adamw
    )
    assert rows == [3, 1, 3]
    assert metrics["train/optimizer_steps"] == 2
    assert torch.equal(skipped, kept)


def test_every_row_runs_where_a_row_without_advantage_has_a_gradient(trainer, monkeypatch):
    monkeypatch.setattr(trainer.cfg.trainer, "skip_rows_without_advantage", True)
    monkeypatch.setattr(trainer, "beta", 0.0)
    monkeypatch.setattr(trainer, "entropy_reg", None)
    assert trainer.skips_rows_without_advantage()
    monkeypatch.setattr(trainer, "beta", 0.05)  # a KL term: its gradient does not depend on the advantage
    assert not trainer.skips_rows_without_advantage()
    monkeypatch.setattr(trainer, "beta", 0.0)
    monkeypatch.setattr(trainer, "entropy_reg", object())  # an entropy term (a bonus or EPO's), likewise
    assert not trainer.skips_rows_without_advantage()
    monkeypatch.setattr(trainer, "entropy_reg", None)
    monkeypatch.setattr(trainer.cfg.trainer, "skip_rows_without_advantage", False)
    assert not trainer.skips_rows_without_advantage()


def test_rows_with_advantage_reads_rounding_residue_as_zero():
    batch = {"advantages": torch.tensor([0.0, 3e-10, -0.25, -2e-9, 0.0]), "n": torch.tensor(5)}
    rows = batching.rows_with_advantage(batch)
    assert rows.tolist() == [2, 3]
    assert batching.rows_with_advantage({"advantages": torch.zeros(4)}).tolist() == [0]  # none: the first row
    selected = batching.select_rows({**batch, "ids": torch.arange(10).view(5, 2)}, rows)
    assert selected["ids"].tolist() == [[4, 5], [6, 7]]
    assert selected["n"] is batch["n"]  # a scalar is passed through
