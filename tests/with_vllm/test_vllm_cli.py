"""The vLLM paths through the real CLI: training on a colocated engine, `agentrl eval` with vLLM (a LoRA run is
served merged), tokenization by vLLM's own loader, and what the CPU build refuses up front."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_tokenizer_folders import STRINGS, tokenization_by_reader
from tests.with_vllm.conftest import NEEDS_VLLM, VLLM

pytestmark = NEEDS_VLLM
GAP = 1e-4  # |trainer - vLLM| per-token log-prob, both float32 (tests/with_vllm/test_vllm_colocate.py)


def train(run_cli, where: Path, *overrides: str) -> Path:
    result = run_cli("train", "+debug=fast", "logger=none", f"hydra.run.dir={where}", *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return where


@pytest.fixture(scope="module")
def vllm_run(cache_dir, tmp_path_factory) -> Path:
    """Two iterations trained on TRL's colocated engine."""
    from tests.conftest import agentrl_cli

    where = tmp_path_factory.mktemp("vllm-run")
    result = agentrl_cli(
        cache_dir, where, "train", "+debug=fast", "logger=none", f"hydra.run.dir={where / 'run'}", *VLLM
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return where / "run"


def test_training_on_the_colocated_engine(vllm_run):
    records = [json.loads(line) for line in (vllm_run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "train/loss" in r]
    assert [r["iteration"] for r in trained] == [1, 2]
    assert all(r["rollout/rows"] > 0 and r["train/optimizer_steps"] >= 1 for r in trained)
    # the engine sampled with the trainer's weights: before the first update, and after it (weight sync)
    assert all(r["rollout/vllm_logp_gap_max"] < GAP for r in trained), [r["rollout/vllm_logp_gap_max"] for r in trained]
    assert (vllm_run / "checkpoints" / "last" / "model.safetensors").is_file()
    assert "eval/success" in records[-1]


def test_two_ddp_ranks_each_with_its_own_engine(run_cli, tmp_path):
    run = train(run_cli, tmp_path / "ddp", "hardware=cpu_ddp", *VLLM)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "train/loss" in r]
    assert [r["iteration"] for r in trained] == [1, 2]
    # the gap is the max over both ranks' tokens: each rank's engine holds the updated weights
    assert all(r["rollout/vllm_logp_gap_max"] < GAP for r in trained), [r["rollout/vllm_logp_gap_max"] for r in trained]
    ranks = {json.loads(line)["rank"] for line in (run / "tasks.jsonl").read_text().splitlines()}
    assert ranks == {0, 1}


def evaluate(run_cli, run: Path, out: Path, *overrides: str) -> dict:
    result = run_cli("eval", str(run), "eval.num_tasks=4", f"output={out}", *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "eval.json").read_text())


def test_eval_with_vllm_follows_the_same_protocol_as_hf(vllm_run, run_cli, tmp_path):
    hf = evaluate(run_cli, vllm_run, tmp_path / "hf")
    vllm = evaluate(run_cli, vllm_run, tmp_path / "vllm", *VLLM)
    assert hf["protocol"]["backend"] == "hf" and vllm["protocol"]["backend"] == "vllm"
    assert {k: v for k, v in hf["protocol"].items() if k != "backend"} == {
        k: v for k, v in vllm["protocol"].items() if k != "backend"
    }
    assert set(hf["metrics"]) == set(vllm["metrics"])
    assert 0.0 <= vllm["metrics"]["eval/success"] <= 1.0
    lines = (tmp_path / "vllm" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == hf["protocol"]["tasks"] * hf["protocol"]["episodes_per_task"]


def test_a_lora_run_is_served_merged(run_cli, tmp_path):
    run = train(run_cli, tmp_path / "lora", "model.lora.enabled=true", "model.lora.rank=4")
    report = evaluate(run_cli, run, tmp_path / "eval", *VLLM)
    assert report["protocol"]["backend"] == "vllm"
    assert 0.0 <= report["metrics"]["eval/success"] <= 1.0


def test_vllms_tokenizer_gives_the_training_ids(vllm_run):
    from vllm.tokenizers import get_tokenizer

    folder = vllm_run / "checkpoints" / "last"
    expected = tokenization_by_reader(folder)["tokenizer.json"]
    tokenizer = get_tokenizer(str(folder))
    assert [tokenizer.encode(s, add_special_tokens=False) for s in STRINGS] == expected


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["rollout.vllm.mode=server"], "rollout.vllm.mode=server cannot train on vLLM's CPU build"),
        (["rollout.vllm.enable_sleep_mode=true"], "enable_sleep_mode needs CUDA"),
    ],
    ids=["server mode", "sleep mode"],
)
def test_what_the_cpu_build_cannot_do_is_refused_in_one_line(run_cli, overrides, message):
    from agentrl.rollout.vllm_engine import installed_vllm

    if not installed_vllm().runs_on_cpu:
        pytest.skip("these refusals are the CPU build's")
    result = run_cli("train", "+debug=fast", "logger=none", *VLLM, *overrides)
    assert result.returncode != 0
    errors = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(errors) == 1 and message in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_the_cpu_build_refuses_a_cuda_profile(hydra_conf):
    """On a machine without CUDA the missing GPU speaks first (tests/test_profiles.py); the build's own refusal is
    checked in-process here."""
    from hydra import compose

    from agentrl.config.checks import check_vllm
    from agentrl.config.typed import typed
    from agentrl.errors import UserError
    from agentrl.rollout.vllm_engine import installed_vllm

    if not installed_vllm().runs_on_cpu:
        pytest.skip("this refusal is the CPU build's")
    cfg = typed(compose(config_name="train", overrides=["hardware=gpu", "rollout.backend=vllm"]))
    with pytest.raises(UserError) as err:
        check_vllm(cfg.rollout, cfg.hardware)
    assert "runs on the CPU only" in str(err.value) and "\n" not in str(err.value)
