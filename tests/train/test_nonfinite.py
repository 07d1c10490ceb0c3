"""A non-finite loss, advantage or gradient skips the update, is counted, and stops the run after too many in a row."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from agentrl.errors import UserError
from agentrl.train import update
from agentrl.train.trainer import AgentTrainer


class _OneProcess:
    device = torch.device("cpu")
    num_processes = 1

    @staticmethod
    def reduce(tensor, reduction):
        return tensor


def _fake_trainer(limit: int = 3):
    return SimpleNamespace(
        accelerator=_OneProcess(),
        entropy_reg=None,
        iteration_metrics={},
        nonfinite_in_a_row=0,
        nonfinite_total=0,
        state=SimpleNamespace(global_step=4),
        cfg=SimpleNamespace(trainer=SimpleNamespace(max_nonfinite_updates=limit)),
    )


def _model_with_gradients():
    model = torch.nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()
    return model


def test_a_skipped_update_leaves_the_optimizer_nothing_to_apply():
    trainer, model = _fake_trainer(), _model_with_gradients()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    assert AgentTrainer._accept_update(trainer, model, finite=False) is False
    optimizer.step()  # what the Trainer does next: with no gradients, Adam leaves every parameter alone
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert trainer.iteration_metrics["train/skipped_updates"] == 1.0


def test_a_finite_update_goes_through_and_resets_the_count():
    trainer, model = _fake_trainer(), _model_with_gradients()
    AgentTrainer._accept_update(trainer, model, finite=False)
    assert AgentTrainer._accept_update(trainer, model, finite=True) is True
    assert trainer.nonfinite_in_a_row == 0 and trainer.nonfinite_total == 1


def test_too_many_in_a_row_stop_the_run_with_one_line():
    trainer, model = _fake_trainer(limit=2), _model_with_gradients()
    AgentTrainer._accept_update(trainer, model, finite=False)
    with pytest.raises(UserError) as err:
        AgentTrainer._accept_update(trainer, model, finite=False)
    assert "trainer.max_nonfinite_updates=2" in str(err.value) and "\n" not in str(err.value)


def _update_one_mini_batch(trainer, model, optimizer, monkeypatch, clip_to: float) -> update.UpdateResult:
    """`update.update_policy` over one mini-batch whose micro-batch loop has already left `model`'s gradients."""
    monkeypatch.setattr(update, "accumulate_gradient", lambda *args: (torch.tensor(0.5), True))
    monkeypatch.setattr(
        update,
        "clipped_grad_norm",
        lambda model, *args: float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip_to)),
    )
    return update.update_policy(
        model,
        optimizer,
        trainer.accelerator,
        [{}],
        micro_batch_size=None,
        max_grad_norm=clip_to,
        loss_of=None,
        loss_context=None,
        accept=lambda finite, which: AgentTrainer._accept_update(trainer, model, finite, which),
    )


def test_a_finite_loss_with_a_nan_gradient_does_not_reach_the_weights(monkeypatch):
    """A NaN in a backward kernel (cuDNN's attention on CUDA did this) gives a finite loss and NaN gradients:
    the step is skipped and counted, and the weights stay as they were."""
    trainer, model = _fake_trainer(), _model_with_gradients()
    model.weight.grad[0, 0] = float("nan")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    result = _update_one_mini_batch(trainer, model, optimizer, monkeypatch, clip_to=1.0)
    assert result.skipped == 1 and not result.losses
    optimizer.step()  # TRL's own step after training_step: nothing to apply
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert trainer.iteration_metrics["train/skipped_updates"] == 1.0


def test_a_finite_gradient_steps_and_reports_the_norm_before_clipping(monkeypatch):
    trainer, model = _fake_trainer(), _model_with_gradients()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norm = float(torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()])))
    before = [p.detach().clone() for p in model.parameters()]
    result = _update_one_mini_batch(trainer, model, optimizer, monkeypatch, clip_to=1e-3)
    assert [float(loss) for loss in result.losses] == [0.5] and result.grad_norms == [pytest.approx(norm)]
    assert result.skipped == 0
    assert not any(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())
