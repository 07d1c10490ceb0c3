"""A non-finite loss, advantage or gradient skips the update, is counted, and stops the run after too many in a row."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from agentrl.errors import UserError
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


def test_a_finite_loss_with_a_nan_gradient_does_not_reach_the_weights():
    """A NaN in a backward kernel (cuDNN's attention on CUDA did this) gives a finite loss and NaN gradients:
    the step is skipped and counted, and the weights stay as they were."""
    trainer, model = _fake_trainer(), _model_with_gradients()
    model.weight.grad[0, 0] = float("nan")
    trainer.optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    trainer._accumulate_gradient = lambda model, mini: (torch.tensor(0.5), True)
    trainer._clipped_grad_norm = lambda model: float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    trainer._accept_update = lambda *a, **k: AgentTrainer._accept_update(trainer, *a, **k)
    before = [p.detach().clone() for p in model.parameters()]
    assert AgentTrainer._update_on(trainer, model, {}, "mini-batch 1 of 1") is None
    trainer.optimizer.step()  # TRL's own step after training_step: nothing to apply
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert trainer.iteration_metrics["train/skipped_updates"] == 1.0


def test_a_finite_gradient_steps_and_reports_the_norm_before_clipping():
    trainer, model = _fake_trainer(), _model_with_gradients()
    trainer.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer._accumulate_gradient = lambda model, mini: (torch.tensor(0.5), True)
    norm = float(torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()])))
    trainer._clipped_grad_norm = lambda model: float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3))
    trainer._accept_update = lambda *a, **k: AgentTrainer._accept_update(trainer, *a, **k)
    before = [p.detach().clone() for p in model.parameters()]
    loss, grad_norm = AgentTrainer._update_on(trainer, model, {}, "mini-batch 1 of 1")
    assert float(loss) == 0.5 and grad_norm == pytest.approx(norm)
    assert not any(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())
