"""hardware.strategy=fsdp: PyTorch's FSDP 2 through accelerate takes the same updates as DDP.

On CPU. accelerate shards on accelerators only (a CPU rank with an FSDP config trains alone, unsharded:
agentrl's checks refuse it). PyTorch's `fully_shard` does run over gloo, so these tests put
tests/train/fsdp_on_cpu/sitecustomize.py on the ranks' path: it lets accelerate take its FSDP path on
two CPU ranks, and everything else (accelerate's wrapping and sharded checkpoints, TRL, agentrl) is the
code a GPU run uses. On a CUDA device, `test_fsdp_on_one_gpu_rank` checks the real thing with one rank.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import REPO, agentrl_cli
from tests.train.test_ddp import SMALL  # the same two-rank run as the DDP tests (KL reference on: sharded too)

pytestmark = pytest.mark.slow

HOOK = REPO / "tests" / "train" / "fsdp_on_cpu"


def _train(cache_dir: Path, run_dir: Path, *extra: str, hook: bool = False):
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    env = {"PYTHONPATH": f"{HOOK}:{REPO}"} if hook else None
    result = agentrl_cli(
        cache_dir, run_dir.parent, "train", *SMALL, *extra, f"hydra.run.dir={run_dir}", timeout=900, env=env
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir):
    out = {}
    for name, extra, hook in (
        ("ddp", ["hardware=cpu_ddp"], False),
        ("fsdp", ["hardware=cpu_ddp", "hardware.strategy=fsdp"], True),
    ):
        run_dir = tmp_path_factory.mktemp(name) / "r"
        out[name] = (run_dir, _train(cache_dir, run_dir, *extra, hook=hook))
    return out


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / "last" / "model.safetensors"))


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_fsdp_is_launched_and_sharded(runs):
    run_dir, result = runs["fsdp"]
    assert "launching 2 ranks (fsdp) through accelerate" in result.stdout
    # accelerate's FSDP checkpoint (gathered to one file: FULL_STATE_DICT) is written only on its FSDP path
    assert (run_dir / "checkpoints" / "last" / "pytorch_model_fsdp.bin").is_file()
    assert not (runs["ddp"][0] / "checkpoints" / "last" / "pytorch_model_fsdp.bin").exists()


def test_fsdp_takes_the_same_updates_as_ddp(runs):
    """Two iterations (the second from weights the first changed) end at the same weights and losses; the float
    sums run in another order (a reduce-scatter against an all-reduce), hence the tolerance."""
    ddp, fsdp = _weights(runs["ddp"][0]), _weights(runs["fsdp"][0])
    assert set(ddp) <= set(fsdp)
    # FSDP's full state dict also lists the tied output head; it is the embedding itself
    for extra in set(fsdp) - set(ddp):
        assert extra == "lm_head.weight"
        torch.testing.assert_close(fsdp[extra], fsdp["model.embed_tokens.weight"], rtol=0, atol=0)
    for key, value in ddp.items():
        torch.testing.assert_close(fsdp[key], value, rtol=1e-5, atol=1e-6, msg=key)
    ddp_records, fsdp_records = _records(runs["ddp"][0]), _records(runs["fsdp"][0])
    assert [r["iteration"] for r in fsdp_records] == [r["iteration"] for r in ddp_records] == [0, 1, 2]
    for a, b in zip(ddp_records[1:], fsdp_records[1:]):
        assert a["train/optimizer_steps"] >= 1 and a["train/grad_norm"] > 0  # the weights did move
        for key in ("train/loss", "train/kl", "train/entropy", "train/grad_norm", "rollout/success"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-7), key


def test_fsdp_checkpoint_resumes(runs, tmp_path, cache_dir):
    """A third iteration from the FSDP checkpoint: accelerate loads its sharded model and optimizer back."""
    import shutil

    run_dir = tmp_path / "r"
    shutil.copytree(runs["fsdp"][0], run_dir, symlinks=True)
    args = ["hardware=cpu_ddp", "hardware.strategy=fsdp", "trainer.iterations=3", "trainer.resume=auto"]
    result = agentrl_cli(
        cache_dir,
        tmp_path,
        "train",
        *[a for a in SMALL if not a.startswith("trainer.iterations")],
        *args,
        f"hydra.run.dir={run_dir}",
        timeout=900,
        env={"PYTHONPATH": f"{HOOK}:{REPO}"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "resuming from" in result.stdout and "(iteration 2)" in result.stdout
    assert [r["iteration"] for r in _records(run_dir)] == [0, 1, 2, 3]


@pytest.mark.gpu
def test_fsdp_on_one_gpu_rank(tmp_path, cache_dir):
    """On a CUDA device: one FSDP rank (accelerate's launcher, FSDP 2) against one plain process, fp32."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    plain, fsdp = tmp_path / "plain" / "r", tmp_path / "fsdp" / "r"
    gpu = ["hardware=gpu", "hardware.precision=fp32"]
    _train(cache_dir, plain, *gpu)
    result = _train(cache_dir, fsdp, *gpu, "hardware.strategy=fsdp")
    assert "launching 1 ranks (fsdp) through accelerate" in result.stdout
    assert (fsdp / "checkpoints" / "last" / "pytorch_model_fsdp.bin").is_file()
    a, b = _weights(plain), _weights(fsdp)
    for key, value in a.items():
        torch.testing.assert_close(b[key], value, rtol=1e-4, atol=1e-5, msg=key)
