"""hardware.precision=bf16 on a CPU: the update runs under bf16 autocast over fp32 weights, and its loss and
gradients stay those of fp32 within bf16's rounding."""

from __future__ import annotations

import pytest
import torch
from accelerate.state import AcceleratorState

from agentrl.cpu import native_bf16
from tests.train.conftest import built_trainer, make_batch

pytestmark = pytest.mark.skipif(not native_bf16(), reason="needs a CPU with bf16 instructions (AVX512-BF16 or AMX)")


def _loss_and_gradients(trainer, batch):
    model = trainer.model
    model.zero_grad()
    with trainer.compute_loss_context_manager():
        loss = trainer._compute_loss(model, batch)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad(), trainer.compute_loss_context_manager():
        logps, _ = trainer._token_logps(model, ids, attention, batch["completion_ids"].size(1))
    return loss.detach(), grads, logps[batch["completion_mask"].bool()]


def _trained_in(precision, cache_dir, folder, batch):
    AcceleratorState._reset_state(True)  # one process, two precisions: accelerate keeps its state per process
    try:
        with built_trainer(cache_dir, folder, [f"hardware.precision={precision}"]) as trainer:
            assert trainer.accelerator.mixed_precision == {"fp32": "no", "bf16": "bf16"}[precision]
            assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}  # AdamW's weights stay fp32
            matmul_dtypes = set()
            layer = trainer.model.model.layers[0].mlp.down_proj  # TRL's fused LM head calls no module of its own
            hook = layer.register_forward_hook(lambda m, i, out: matmul_dtypes.add(out.dtype))
            found = _loss_and_gradients(trainer, batch(trainer))
            hook.remove()
            return (*found, matmul_dtypes)
    finally:
        AcceleratorState._reset_state(True)


def test_the_bf16_update_has_fp32s_loss_and_gradients(cache_dir, tmp_path):
    def batch(trainer):
        return make_batch(trainer, [1.0, -0.5, 0.25, -1.0], [6, 3, 8, 5], prompt_length=12)

    loss32, grads32, logps32, dtypes32 = _trained_in("fp32", cache_dir, tmp_path / "fp32", batch)
    loss16, grads16, logps16, dtypes16 = _trained_in("bf16", cache_dir, tmp_path / "bf16", batch)
    assert dtypes32 == {torch.float32}
    assert dtypes16 == {torch.bfloat16}  # the backbone's matmuls ran in bf16: autocast was on
    # bf16 keeps 8 bits of mantissa (relative rounding 2^-9, about 0.2 %) in every matmul's inputs. Measured on the
    # tiny model: log-probs (about -6) within 0.01, the same loss (the first step's ratio is 1), gradient cosine
    # 0.99998 and norm ratio 1.001. The bounds leave room for another CPU's kernels, not for a wrong pass.
    assert (logps16 - logps32).abs().max() <= 0.05
    assert abs(float(loss16 - loss32)) <= 0.02 * abs(float(loss32)) + 1e-3
    cosine = torch.nn.functional.cosine_similarity(grads16, grads32, dim=0)
    assert cosine > 0.999, f"gradient cosine {cosine:.5f}"
    assert float(grads16.norm() / grads32.norm()) == pytest.approx(1.0, abs=0.02)


def test_the_rollouts_generation_runs_under_bf16_autocast(cache_dir, tmp_path):
    AcceleratorState._reset_state(True)
    try:
        with built_trainer(cache_dir, tmp_path, ["hardware.precision=bf16"]) as trainer:
            seen = set()
            layer = trainer.model.model.layers[0].mlp.down_proj
            hook = layer.register_forward_hook(lambda m, i, out: seen.add(out.dtype))
            tasks = [trainer.suite.task("train", 0)]
            batch = trainer._rollout(tasks, group_size=2)
            hook.remove()
            assert len(batch) > 0
            assert seen == {torch.bfloat16}
    finally:
        AcceleratorState._reset_state(True)


def test_generate_in_bf16_generates_on_bf16_weights_and_trains_the_fp32_ones(cache_dir, tmp_path):
    AcceleratorState._reset_state(True)
    try:
        overrides = ["hardware.precision=bf16", "rollout.generate_in_bf16=true"]
        with built_trainer(cache_dir, tmp_path, overrides) as trainer:
            fp32 = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
            weights_seen = []  # the weight dtype of each generation forward
            layer = trainer.model.model.layers[0].mlp.down_proj
            hook = layer.register_forward_hook(lambda m, i, out: weights_seen.append(m.weight.dtype))
            batch = trainer._rollout([trainer.suite.task("train", 0)], group_size=2)
            hook.remove()
            assert len(batch) > 0 and set(weights_seen) == {torch.bfloat16}
            evaluated = []
            trainer.evaluator = lambda model, *args, **kwargs: evaluated.append(model.lm_head.weight.dtype) or {}
            trainer.evaluate()
            assert evaluated == [torch.bfloat16]
            for name, p in trainer.model.named_parameters():  # AdamW's weights: fp32, as they were
                assert p.dtype == torch.float32 and torch.equal(p, fp32[name]), name
    finally:
        AcceleratorState._reset_state(True)
