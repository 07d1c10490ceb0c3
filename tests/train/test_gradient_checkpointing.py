"""`trainer.gradient_checkpointing` saves memory and changes nothing else, in-process on the real trainer.

- The config reaches the model: with the key on, each decoder layer runs its forward again in the backward pass
  (the recomputation that is the point), with it off once.
- The loss and the gradient equal those without checkpointing, for full fine-tuning and for LoRA (where
  non-reentrant checkpointing needs no input gradients), with the KL term on so the reference pass runs too.
"""

from __future__ import annotations

import pytest
import torch

from tests.train.conftest import built_trainer, make_batch

pytestmark = pytest.mark.slow  # builds the +debug=fast tiny model once (seconds)

ADVANTAGES = [1.0, -1.0, -0.5, 2.0]
LENGTHS = [3, 2, 4, 3]
LORA = [
    "model.lora.enabled=true",
    "model.lora.rank=4",
    "model.lora.dropout=0.0",
    "model.lora.target_modules=[q_proj,v_proj]",
]


def decoder_layers(model) -> list[torch.nn.Module]:
    """The Qwen2 decoder layers, under a PEFT wrapper or not."""
    return [m for name, m in model.named_modules() if type(m).__name__ == "Qwen2DecoderLayer"]


def switch_on_as_transformers_train_does(trainer) -> None:
    """transformers' `Trainer.train` turns checkpointing on from the config TRL was given (not `__init__`, so an
    in-process trainer that never calls `train` needs this); TRL's `__init__` already made PEFT's inputs need grads."""
    assert trainer.args.gradient_checkpointing_kwargs == {"use_reentrant": False}
    if trainer.args.gradient_checkpointing:
        trainer.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs
        )


def loss_gradient_and_layer_calls(trainer, batch) -> tuple[float, torch.Tensor, int]:
    """One micro-batch's loss and backward: (loss, the trainable parameters' gradient, calls into layer 0). Counted by
    a pre-hook: the non-reentrant recomputation stops early, before the layer's forward hooks would run."""
    model = trainer.model
    calls = []
    hook = decoder_layers(model)[0].register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        model.zero_grad(set_to_none=True)
        loss = trainer._compute_loss(model, batch)
        loss.backward()
    finally:
        hook.remove()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad and p.grad is not None])
    model.zero_grad(set_to_none=True)
    return loss.item(), grads, len(calls)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_checkpointing_gives_the_same_loss_and_gradient(cache_dir, tmp_path, lora):
    overrides = [*(LORA if lora else []), "algo.kl_coef=0.1"]
    results = {}
    weights = None
    for checkpointing in (False, True):
        with built_trainer(
            cache_dir, tmp_path / str(checkpointing), [*overrides, f"trainer.gradient_checkpointing={checkpointing}"]
        ) as trainer:
            if weights is None:
                weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
            else:  # the same LoRA initialisation (and, for full fine-tuning, the same weights) in both runs
                trainer.model.load_state_dict(weights)
            switch_on_as_transformers_train_does(trainer)
            assert trainer.accelerator.unwrap_model(trainer.model).is_gradient_checkpointing == checkpointing
            batch = make_batch(trainer, ADVANTAGES, LENGTHS, seed=7)
            trainer._add_policy_logps(batch)  # the KL reference's log-probs (LoRA: the adapter switched off)
            results[checkpointing] = loss_gradient_and_layer_calls(trainer, batch)
    (loss_off, grad_off, calls_off), (loss_on, grad_on, calls_on) = results[False], results[True]
    assert (calls_off, calls_on) == (1, 2)  # checkpointing recomputes the layer in the backward pass
    assert grad_off.abs().sum() > 0
    assert loss_on == pytest.approx(loss_off, abs=1e-6)
    assert torch.allclose(grad_on, grad_off, atol=1e-6, rtol=1e-5)
