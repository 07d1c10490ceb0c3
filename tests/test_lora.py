"""LoRA: `model.lora.*` maps onto PEFT; a real LoRA run saves only an adapter, which `agentrl eval` loads
onto its base and `agentrl export` merges into a plain model with the same logits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from agentrl.errors import UserError
from agentrl.models.lora import (
    base_model_source,
    is_adapter_checkpoint,
    load_adapter_checkpoint,
    load_checkpoint,
    merge_adapter,
    merge_on_save,
    peft_config,
    servable_model,
)

TARGETS = ("q_proj", "v_proj")


def _lora(**kw):
    base = dict(enabled=True, rank=4, alpha=8, dropout=0.0, target_modules=list(TARGETS), merge_on_save=False)
    return SimpleNamespace(**{**base, **kw})


def test_peft_config_maps_model_lora():
    assert peft_config(None) is None
    assert peft_config(_lora(enabled=False)) is None
    config = peft_config(_lora(rank=8, alpha=16, dropout=0.1))
    assert (config.r, config.lora_alpha, config.lora_dropout) == (8, 16, 0.1)
    assert set(config.target_modules) == set(TARGETS)
    assert config.task_type == "CAUSAL_LM"


# --------------------------------------------------------------------------- a real LoRA training run


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, cache_dir):
    """One debug LoRA run (rank 4 on q/v, KL on so the adapter-off reference runs), shared by the tests below."""
    from tests.conftest import agentrl_cli

    run_dir = tmp_path_factory.mktemp("lora") / "r"
    result = agentrl_cli(
        cache_dir,
        run_dir.parent,
        "train",
        "+debug=fast",
        "logger=none",
        "model.lora.enabled=true",
        "model.lora.rank=4",
        "model.lora.dropout=0.0",
        "model.lora.target_modules=[q_proj,v_proj]",
        "algo.kl_coef=0.1",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def _checkpoint(run_dir: Path) -> Path:
    return (run_dir / "checkpoints" / "last").resolve()


def _tiny_base(run_dir: Path, cache_dir: Path) -> Path:
    """The tiny model the run trained on, as its adapter recorded it."""
    recorded = json.loads((_checkpoint(run_dir) / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert Path(recorded).parent == Path(cache_dir) / "tiny"
    return Path(recorded)


@pytest.mark.slow
def test_checkpoint_holds_only_a_trained_adapter(lora_run):
    ckpt = _checkpoint(lora_run)
    assert is_adapter_checkpoint(ckpt)
    assert (ckpt / "adapter_model.safetensors").is_file() and (ckpt / "adapter_config.json").is_file()
    assert not (ckpt / "model.safetensors").exists() and not (ckpt / "config.json").exists()
    assert not (ckpt / "merged").exists()  # merge_on_save is off by default
    config = json.loads((ckpt / "adapter_config.json").read_text())
    assert config["r"] == 4 and set(config["target_modules"]) == set(TARGETS)
    weights = load_file(str(ckpt / "adapter_model.safetensors"))
    assert weights and all(".lora_A." in k or ".lora_B." in k for k in weights), "base weights leaked into the adapter"
    assert {k.split(".")[-3] for k in weights} == set(TARGETS)
    lora_b = {k: v for k, v in weights.items() if ".lora_B." in k}
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b.values()), "lora_B starts at zero and must have trained"


@pytest.mark.slow
def test_kl_reference_is_the_base_model(lora_run):
    records = [json.loads(line) for line in (lora_run / "metrics.jsonl").read_text().splitlines()]
    kl = [r["train/kl"] for r in records if "train/kl" in r]
    assert len(kl) == 2
    assert abs(kl[0]) < 1e-6  # before the first update the adapter is zero: policy == base
    assert kl[-1] > 0  # afterwards the reference (adapter off) differs from the policy


@pytest.mark.slow
def test_only_adapted_modules_change_when_merged(lora_run, cache_dir, tmp_path):
    ckpt = _checkpoint(lora_run)
    assert base_model_source(ckpt) == str(_tiny_base(lora_run, cache_dir))
    out = merge_adapter(ckpt, tmp_path / "merged")
    base = load_file(str(_tiny_base(lora_run, cache_dir) / "model.safetensors"))
    merged = load_file(str(out / "model.safetensors"))
    assert base.keys() == merged.keys()
    changed = {name for name in base if not torch.equal(base[name], merged[name])}
    assert changed and all(name.split(".")[-2] in TARGETS for name in changed), changed


@pytest.mark.slow
def test_eval_on_the_lora_run(lora_run, run_cli, tmp_path):
    out = tmp_path / "ev"
    result = run_cli("eval", str(lora_run), "eval.num_tasks=2", f"output={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "eval.json").read_text())
    assert report["protocol"]["policy"] == str(_checkpoint(lora_run)) and report["protocol"]["tasks"] == 2
    assert 0.0 <= report["metrics"]["eval/success"] <= 1.0
    assert (out / "trajectories.jsonl").read_text().strip()


@pytest.mark.slow
def test_export_gives_a_plain_model_with_the_same_logits(lora_run, run_cli, tmp_path):
    from transformers import AutoModelForCausalLM

    from agentrl.models.load import load_tokenizer

    out = tmp_path / "exported"
    result = run_cli("export", str(lora_run), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "merged" in result.stdout
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert not (out / "adapter_config.json").exists()
    assert (out / "agentrl_config.yaml").is_file()  # `agentrl eval OUT` keeps the run's env and generation settings

    plain = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ckpt = _checkpoint(lora_run)
    peft_model = load_adapter_checkpoint(ckpt, base_model_source(ckpt), merge=False)
    assert type(peft_model).__name__ == "PeftModelForCausalLM"
    tokenizer = load_tokenizer(str(out))
    ids = tokenizer(["<action>go to fridge 1</action>", "look"], return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = peft_model(**ids).logits
        got = plain(**ids).logits
    assert torch.allclose(expected, got, atol=1e-5, rtol=1e-4)

    with pytest.raises(UserError, match="already exists"):  # never written over
        merge_adapter(ckpt, out)


@pytest.mark.slow
def test_merge_on_save_writes_a_servable_folder(lora_run, tmp_path):
    ckpt = tmp_path / "checkpoint-2"
    shutil.copytree(_checkpoint(lora_run), ckpt)
    merged = merge_on_save(ckpt)
    assert merged == ckpt / "merged" and (merged / "config.json").is_file() and (merged / "tokenizer.json").is_file()
    assert servable_model(ckpt, tmp_path / "scratch") == str(merged)
    assert not (tmp_path / "scratch").exists()
    model, tokenizer = load_checkpoint(merged)  # a plain model: no PEFT
    assert type(model).__name__ == "Qwen2ForCausalLM" and tokenizer.padding_side == "left"


# --------------------------------------------------------------------------- broken adapters


def _copy(lora_run: Path, tmp_path: Path) -> Path:
    ckpt = tmp_path / "broken"
    shutil.copytree(_checkpoint(lora_run), ckpt)
    return ckpt


@pytest.mark.slow
def test_corrupt_adapter_weights_are_one_line_and_exit_2(lora_run, run_cli, tmp_path):
    ckpt = _copy(lora_run, tmp_path)
    (ckpt / "adapter_model.safetensors").write_bytes(b"\x00garbage")
    result = run_cli("eval", str(ckpt), "eval.num_tasks=1", f"output={tmp_path / 'ev'}")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: cannot load the LoRA adapter"), lines
    assert "adapter_model.safetensors" in lines[0]
    assert not (tmp_path / "ev" / "eval.json").exists()
    with pytest.raises(UserError, match="cannot load the LoRA adapter"):  # export says the same, and writes nothing
        merge_adapter(ckpt, tmp_path / "exp")
    assert not (tmp_path / "exp").exists()


@pytest.mark.slow
@pytest.mark.parametrize("breakage", ["config not json", "no weights", "weights for another model"])
def test_broken_adapter_is_a_user_error(breakage, lora_run, tmp_path):
    ckpt = _copy(lora_run, tmp_path)
    if breakage == "config not json":
        (ckpt / "adapter_config.json").write_text("{ truncated")
    elif breakage == "no weights":
        (ckpt / "adapter_model.safetensors").unlink()
    else:  # an adapter whose keys name no module of the base
        from safetensors.torch import save_file

        weights = load_file(str(ckpt / "adapter_model.safetensors"))
        save_file(
            {k.replace("layers.", "blocks."): v for k, v in weights.items()}, str(ckpt / "adapter_model.safetensors")
        )
    with pytest.raises(UserError) as err:
        load_checkpoint(ckpt)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"cannot load the LoRA adapter in {ckpt}")


@pytest.mark.slow
def test_base_falls_back_to_the_training_config(lora_run, cache_dir, tmp_path):
    from omegaconf import OmegaConf

    base = _tiny_base(lora_run, cache_dir)
    ckpt = _copy(lora_run, tmp_path)
    config = json.loads((ckpt / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "moved-away")
    (ckpt / "adapter_config.json").write_text(json.dumps(config))
    trained = OmegaConf.load(ckpt / "agentrl_config.yaml")
    trained.model.tiny, trained.model.path = None, str(base)  # as if trained with model.path=<the tiny build>
    OmegaConf.save(trained, ckpt / "agentrl_config.yaml")
    assert base_model_source(ckpt) == str(base)
    (ckpt / "agentrl_config.yaml").unlink()
    assert base_model_source(ckpt) == str(
        tmp_path / "moved-away"
    )  # the recorded name, as a hub id: the loader reports it


@pytest.mark.slow
def test_vllm_eval_gets_the_merged_folder(lora_run, tmp_path, monkeypatch):
    """rollout.backend=vllm: the engine is handed a plain merged folder, never the adapter (vLLM itself is faked)."""
    from contextlib import ExitStack

    import agentrl.rollout.vllm_policy as vllm_policy
    from agentrl.evaluation.held_out import _checkpoint_policy

    seen = {}

    class FakeEngine:
        def close(self):  # the engine must stop while its merged weights are still on disk
            seen["merge_present_at_close"] = Path(seen["source"]).exists()

    engine = FakeEngine()

    def fake_make_eval_policy(model_source, tokenizer, sampling, vllm_cfg, **kw):
        seen.update(
            dtype=kw.get("dtype"),
            source=model_source,
            files=sorted(p.name for p in Path(model_source).iterdir()),
            tokenizer=tokenizer,
        )
        return engine

    monkeypatch.setattr(vllm_policy, "make_eval_policy", fake_make_eval_policy)
    cfg = SimpleNamespace(
        rollout=SimpleNamespace(backend="vllm", vllm=SimpleNamespace()),
        hardware=SimpleNamespace(precision="fp32"),
    )
    with ExitStack() as scratch:
        assert _checkpoint_policy(cfg, _checkpoint(lora_run), None, None, scratch, seed=0) is engine
        assert "model.safetensors" in seen["files"] and "adapter_config.json" not in seen["files"]
    assert seen["merge_present_at_close"]  # the engine stopped first ...
    assert not Path(seen["source"]).exists()  # ... then the temporary merge went
    assert seen["tokenizer"].padding_side == "left"
    assert seen["dtype"] == "float32"  # the engine computes in the training precision
