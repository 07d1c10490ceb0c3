"""The memory plan: each term on a made-up model (numbers worked out by hand), the refusal, its override, and
`agentrl config` printing the plan. Nothing is downloaded or loaded."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agentrl.cli.launch import preflight
from agentrl.errors import UserError
from agentrl.memory import check as memory_check
from agentrl.memory import plan as mp
from tests.conftest import agentrl_cli

# V=100, H=8, L=2, I=16, 2 heads of 4, 1 key/value head: k and v project to 4
SHAPE = mp.ModelShape(vocab_size=100, hidden_size=8, num_layers=2, intermediate_size=16, num_heads=2, num_kv_heads=1)
# fp32 on CPU, 3 rows of 10 + 5 tokens in the largest micro-batch, 6 rows per generate call
WORK = mp.Workload(bytes_per_value=4, device="cpu", micro_batch_rows=3, max_prompt_tokens=10, max_new_tokens=5)


def test_parameters_of_a_made_up_model():
    # per layer: q 64 + k 32 + v 32 + o 64 + gate/up/down 3 * 128 = 576 weights, q/k/v biases 8 + 4 + 4, norms 16
    # = 608; tied embedding 800, final norm 8
    assert mp.parameter_count(SHAPE) == 800 + 8 + 2 * 608
    assert mp.parameter_count(replace(SHAPE, tied_embeddings=False)) == 2024 + 800
    # rank 2 on q (8 -> 8) and v (8 -> 4): 2 * 16 + 2 * 12 per layer
    assert mp.lora_parameter_count(SHAPE, 2, ["q_proj", "v_proj"]) == 2 * (32 + 24)


def test_weights_gradients_optimizer_and_reference():
    assert mp.weights(SHAPE, WORK) == 2024 * 4
    assert mp.gradients(SHAPE, WORK) == 2024 * 4
    assert mp.optimizer(SHAPE, WORK) == 2 * 2024 * 4  # AdamW's two moments
    assert mp.reference(SHAPE, WORK) == 0
    assert mp.reference(SHAPE, replace(WORK, reference=True)) == 2024 * 4
    bf16 = replace(WORK, bytes_per_value=2, device="cuda")
    assert mp.optimizer(SHAPE, bf16) == 2 * 2024 * 2  # the moments take the weights' dtype


def test_lora_trains_only_the_adapter_in_fp32():
    lora = replace(WORK, bytes_per_value=2, device="cuda", lora_rank=2, lora_targets=("q_proj", "v_proj"))
    assert mp.weights(SHAPE, lora) == 2024 * 2 + 112 * 4
    assert mp.gradients(SHAPE, lora) == 112 * 4
    assert mp.optimizer(SHAPE, lora) == 2 * 112 * 4


def test_sharding_divides_what_the_strategy_splits():
    zero3 = replace(WORK, shards=4)
    assert mp.weights(SHAPE, zero3) == 2024 * 4 // 4
    assert mp.optimizer(SHAPE, zero3) == 2 * 2024 * 4 // 4
    zero2 = replace(WORK, optimizer_shards=4)
    assert mp.weights(SHAPE, zero2) == 2024 * 4
    assert mp.gradients(SHAPE, zero2) == 2024


def test_micro_batch_tokens_bound_the_micro_batch():
    assert mp.micro_batch_token_count(WORK) == 3 * 15
    assert mp.micro_batch_token_count(replace(WORK, micro_batch_tokens=20)) == 20
    assert mp.micro_batch_token_count(replace(WORK, micro_batch_tokens=10)) == 15  # a longer row goes alone
    assert mp.micro_batch_token_count(replace(WORK, micro_batch_tokens=1000)) == 45


def test_activations_with_and_without_checkpointing():
    per_token_layer = (12 * 8 + 4 * 16) * 4
    assert mp.activation_bytes_per_token_layer(SHAPE, 4) == per_token_layer
    assert mp.activation_bytes_per_token_layer(SHAPE, 2) == (12 * 8 + 4 * 16) * 2 + 4 * 8 * 4  # fp32 norms
    assert mp.activations(SHAPE, WORK) == 45 * 2 * per_token_layer
    assert mp.activations(SHAPE, replace(WORK, gradient_checkpointing=True)) == 45 * (2 * 8 * 4 + per_token_layer)


def test_lm_head_tiles_and_fp32_gradients():
    # CPU: the completion's positions (15, as on CUDA), 9 fp32 tiles of 15 x 100, the input's gradient 15 x 8 and the
    # weight's 100 x 8, fp32
    assert mp.lm_head(SHAPE, WORK) == 15 * 100 * 4 * 9 + 15 * 8 * 4 + 100 * 8 * 4
    # CUDA: only the completions' 3 x 5 positions, one bf16 tile
    cuda = replace(WORK, bytes_per_value=2, device="cuda")
    assert mp.lm_head(SHAPE, cuda) == 15 * 100 * 2 + 15 * 8 * 4 + 100 * 8 * 4
    # a frozen head (LoRA) has no weight gradient
    assert mp.lm_head(SHAPE, replace(cuda, lora_rank=2)) == 15 * 100 * 2 + 15 * 8 * 4


def test_generation_terms():
    gen = replace(WORK, generation_rows=6)
    assert mp.kv_cache(SHAPE, gen) == 2 * 2 * 4 * 4 * 6 * 15
    # one fp32 row of V per sequence, whatever the reply's length (the log-probs are taken step by step)
    assert mp.logprob_row(SHAPE, gen) == 6 * 100 * 4
    assert mp.logprob_row(SHAPE, replace(gen, max_new_tokens=500)) == 6 * 100 * 4
    assert mp.prefill(SHAPE, gen) == 6 * 10 * (4 * 8 + 3 * 16) * 4
    assert mp.kv_cache(SHAPE, WORK) == mp.logprob_row(SHAPE, WORK) == 0  # vLLM generates: no HF generate call
    assert mp.bf16_weights(SHAPE, gen) == 0
    assert mp.bf16_weights(SHAPE, replace(gen, generate_in_bf16=True)) == 2024 * 2  # P in bf16, while generating


def test_generating_in_bf16_adds_the_rounded_weights_to_the_generation_phase():
    plain = memory_check.plan_of(preflight("train", ["hardware.precision=bf16"]))[0]
    rounded = memory_check.plan_of(preflight("train", ["hardware.precision=bf16", "rollout.generate_in_bf16=true"]))[0]
    parameters = mp.parameter_count(memory_check.model_shape(preflight("train", []).model))
    assert rounded.generation_bytes - plain.generation_bytes == parameters * 2
    assert memory_check.PHASE["bf16_weights"] == "generation"


def test_the_peak_is_what_stays_plus_the_larger_phase():
    estimate = mp.plan(SHAPE, replace(WORK, generation_rows=6, reference=True, vllm_bytes=1000))
    t = estimate.terms
    staying = mp.GIB + 2024 * 4 * 2 + 2 * 2024 * 4 + 1000  # runtime, weights, reference, optimizer, vLLM
    update = t["gradients"] + t["activations"] + t["lm_head"]
    generation = t["kv_cache"] + t["logprob_row"] + t["prefill"]
    assert update > generation and estimate.larger_phase == "update"
    assert estimate.peak == staying + update


def test_the_tiny_models_build_is_a_phase_of_its_own():
    built = replace(WORK, build_pairs=10, build_rows=2, build_prompt_tokens=10)
    # 10 pairs of 10 + 5 ids at 160 bytes, and 10 prompts of 10 tokens' worth of text (8 characters a token)
    assert mp.build_data(built) == 10 * 15 * 160 + 10 * 10 * 8
    # one step of 2 rows of 15 tokens: 2 layers of (12 * 8 + 4 * 16) * 4 bytes, and 3 fp32 copies of 100 logits
    assert mp.warmup(SHAPE, built) == 2 * 15 * (2 * 640 + 100 * 4 * 3)
    assert mp.build_data(WORK) == mp.warmup(SHAPE, WORK) == 0  # nothing is built
    estimate = mp.plan(SHAPE, replace(built, build_pairs=10**6))
    assert estimate.larger_phase == "build"
    assert estimate.peak == estimate.staying_bytes + estimate.build_bytes
    assert memory_check.PHASE["warmup"] == "build"


def test_largest_fitting_budget_fits_and_the_next_does_not():
    big = mp.ModelShape(
        vocab_size=151936, hidden_size=896, num_layers=24, intermediate_size=4864, num_heads=14, num_kv_heads=2
    )
    work = mp.Workload(bytes_per_value=4, device="cpu", micro_batch_rows=64, max_prompt_tokens=2048, max_new_tokens=128)
    limit = 20 * mp.GIB
    budget = mp.largest_fitting_budget(big, work, limit)
    assert budget is not None and budget % 256 == 0
    assert mp.plan(big, replace(work, micro_batch_tokens=budget)).peak <= limit
    assert mp.plan(big, replace(work, micro_batch_tokens=budget + 256)).peak > limit


def test_a_qwen_config_json_gives_the_published_parameter_count():
    from agentrl.models.qwen_shapes import QWEN25_VOCAB_SIZE, SIZES

    shape = mp.ModelShape.from_hf_config({**SIZES["0.5b"], "vocab_size": QWEN25_VOCAB_SIZE, "model_type": "qwen2"})
    assert mp.parameter_count(shape) == 494_032_768  # Qwen2.5-0.5B's safetensors


# --------------------------------------------------------------------------- from a composed config


def _memory(monkeypatch, gib: float) -> None:
    monkeypatch.setattr(memory_check, "device_memory", lambda hardware: int(gib * mp.GIB))


def test_the_embedded_default_is_not_refused_on_24_gb(monkeypatch):
    _memory(monkeypatch, 24)
    memory_check.check_memory(preflight("train", []))


def test_the_0_5b_defaults_fit_24_gb_with_margin(monkeypatch):
    _memory(monkeypatch, 24)
    found = memory_check.plan_of(preflight("train", ["model=qwen2.5-0.5b-instruct"]))
    assert found is not None
    assert found[0].peak < 0.85 * 24 * mp.GIB


def test_an_oversized_run_is_refused_in_one_line_naming_the_keys(monkeypatch):
    _memory(monkeypatch, 1.5)  # the tiny default's update needs more (every row of 512 + 16 tokens)
    cfg = preflight("train", [])
    with pytest.raises(UserError) as refused:
        memory_check.check_memory(cfg)
    line = str(refused.value)
    assert "\n" not in line
    assert "more than this machine's 1.50 GiB" in line and "(update phase)" in line
    for key in ("trainer.micro_batch_tokens=", "trainer.micro_batch_size", "trainer.gradient_checkpointing=true"):
        assert key in line
    assert "model.lora.enabled=true" in line and "trainer.memory_check=false" in line
    assert "trainer.group_size" not in line  # the rollout fits: its keys would not help
    assert "model.tiny.demo_turns" not in line  # the shipped build is loaded: nothing is built
    budget = int(line.split("trainer.micro_batch_tokens=")[1].split(",")[0])
    cfg.trainer.micro_batch_tokens = budget
    memory_check.check_memory(cfg)  # the budget it names fits


def test_a_tiny_model_to_build_is_counted_and_refused_naming_the_builds_keys(monkeypatch):
    _memory(monkeypatch, 24)
    shipped = memory_check.plan_of(preflight("train", []))[0]
    built = memory_check.plan_of(preflight("train", ["model.tiny.shipped=false"]))[0]
    assert shipped.build_bytes == 0 and built.build_bytes > 0  # household's 48,000 pairs at the 512-token budget
    memory_check.check_memory(preflight("train", ["model.tiny.shipped=false"]))
    with pytest.raises(UserError) as refused:
        memory_check.check_memory(preflight("train", ["model.tiny.shipped=false", "model.tiny.demo_turns=4000000"]))
    line = str(refused.value)
    assert "(build phase)" in line and "\n" not in line
    for key in ("rollout.max_prompt_tokens", "model.tiny.demo_turns", "model.tiny.warmup_batch_size"):
        assert key in line
    assert "trainer.micro_batch_tokens" not in line  # the update fits


def test_memory_check_false_lets_it_run(monkeypatch):
    _memory(monkeypatch, 1)
    memory_check.check_memory(preflight("train", ["trainer.memory_check=false"]))
    with pytest.raises(UserError):
        memory_check.check_memory(preflight("train", []))


def test_a_model_folder_is_read_from_its_config_json(monkeypatch, tmp_path):
    _memory(monkeypatch, 1)
    (tmp_path / "config.json").write_text(
        json.dumps(
            dict(
                model_type="qwen2",
                vocab_size=100,
                hidden_size=8,
                num_hidden_layers=2,
                intermediate_size=16,
                num_attention_heads=2,
                num_key_value_heads=1,
            )
        )
    )
    cfg = preflight("train", ["model=qwen2.5-0.5b-instruct", f"model.path={tmp_path}"])
    found = memory_check.plan_of(cfg)
    assert found is not None and found[0].terms["weights"] == 2024 * 4
    (tmp_path / "config.json").unlink()
    assert memory_check.plan_of(cfg) is None  # nothing cheap to read: no plan, no refusal
    memory_check.check_memory(cfg)


def test_config_prints_the_memory_plan(run_cli):
    result = run_cli("config", "model=qwen2.5-0.5b-instruct", "trainer.gradient_checkpointing=false")
    assert result.returncode == 0, result.stderr
    assert "memory plan: estimated peak" in result.stdout
    for term in ("weights", "optimizer", "reference", "activations", "lm_head", "kv_cache", "logprob_row"):
        assert term in result.stdout


H100 = 81559 * 1024**2  # an 80 GB H100, as nvidia-smi reports it


@pytest.mark.parametrize(
    "recipe, hardware, share",
    [
        ("grpo_alfworld_1.5b", ["hardware=gpu"], 0.85),
        ("grpo_alfworld_1.5b", ["hardware=gpu", "rollout.backend=vllm"], 0.85),
        ("grpo_alfworld_7b", ["hardware=multi_gpu", "hardware.num_processes=4", "hardware.strategy=fsdp"], 0.85),
        ("gigpo_alfworld_7b_lora", ["hardware=multi_gpu", "hardware.num_processes=2"], 0.85),
        ("gigpo_alfworld_7b_lora", ["hardware=gpu", "rollout.backend=vllm"], 0.85),
        # HF generate's prefill and cache for 128 prompts of 2048 tokens: 68.8 GiB, fits with little margin
        ("gigpo_alfworld_7b_lora", ["hardware=gpu"], 0.87),
    ],
)
def test_the_recipes_fit_80_gb_gpus_on_their_documented_hardware(recipe, hardware, share):
    cfg = preflight("train", [f"+experiment={recipe}", *hardware])
    estimate = mp.plan(memory_check.model_shape(cfg.model), memory_check.workload(cfg, H100))
    assert estimate.peak < share * H100


def test_the_1_5b_rollout_through_hf_generate_plans_no_row_per_generated_token():
    """128 episodes x 512 new tokens: the plan's generation phase is the cache, the prefill and one fp32 row of the
    151,936-token vocabulary per episode (0.07 GiB), not one per generated token (37.09 GiB)."""
    cfg = preflight("train", ["+experiment=gigpo_alfworld_1.5b", "hardware=gpu"])
    shape, work = memory_check.model_shape(cfg.model), memory_check.workload(cfg, H100)
    assert (work.generation_rows, work.max_new_tokens, shape.vocab_size) == (128, 512, 151936)
    estimate = mp.plan(shape, work)
    assert estimate.terms["logprob_row"] == 128 * 151936 * 4
    assert "scores" not in estimate.terms
    assert estimate.larger_phase == "generation"
    assert round(estimate.peak / mp.GIB, 2) == 36.95  # 73.97 while generate kept every step's scores


def test_a_plan_made_without_a_gpu_counts_vllms_share_of_an_80_gb_gpu(monkeypatch):
    """`agentrl config ... hardware=gpu rollout.backend=vllm` on a laptop: the plan is made before going to the
    cluster, and counts the engine (docs/reproducing.md: 56.7 GiB, 23.9 of it vLLM's)."""
    overrides = ["+experiment=gigpo_alfworld_1.5b", "hardware=gpu", "rollout.backend=vllm"]
    monkeypatch.setattr(memory_check, "device_memory", lambda hardware: None)  # no CUDA here
    cfg = preflight("train", overrides)
    estimate, _, work, memory = memory_check.plan_of(cfg)
    assert memory is None and work.vllm_bytes == int(0.3 * H100)
    assert f"{estimate.peak / mp.GIB:.1f}" == "56.7"
    text = memory_check.plan_text(cfg)
    assert "estimated peak 56.70 GiB" in text and "vllm            23.89 GiB" in text
    assert text.endswith("no GPU here: vLLM's 0.3 share is of an 80 GB GPU (79.65 GiB)")
    _memory(monkeypatch, 40)  # a GPU of this machine: its own memory, and no note
    cfg = preflight("train", overrides)
    assert memory_check.plan_of(cfg)[2].vllm_bytes == int(0.3 * 40 * mp.GIB)
    assert "no GPU here" not in memory_check.plan_text(cfg)


def test_a_full_7b_update_does_not_fit_one_gpu_whatever_the_micro_batch():
    cfg = preflight("train", ["+experiment=grpo_alfworld_7b", "hardware=gpu", "rollout.backend=vllm"])
    shape, work = memory_check.model_shape(cfg.model), memory_check.workload(cfg, H100)
    assert mp.largest_fitting_budget(shape, work, H100) is None


def test_train_refuses_before_building_anything_in_one_line(tmp_path):
    # a million-token prompt bound: no machine holds the plan's activations
    cache_dir = tmp_path / "empty-cache"  # of its own: the session's cache holds what other tests built
    cache_dir.mkdir()
    result = agentrl_cli(cache_dir, tmp_path, "train", "rollout.max_prompt_tokens=1000000", "logger=none")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the memory plan estimates"), result.stderr[-2000:]
    for key in ("trainer.micro_batch_tokens", "rollout.max_prompt_tokens", "trainer.memory_check=false"):
        assert key in lines[0]
    assert not any(cache_dir.iterdir())  # the tiny model was not built


def test_cpu_ranks_share_the_machines_memory(monkeypatch):
    _memory(monkeypatch, 2.5)  # the tiny default: 1.72 GiB in one process, about 1.36 per rank in two
    memory_check.check_memory(preflight("train", ["hardware=cpu"]))
    with pytest.raises(UserError, match=r"more than this machine's 1\.25 GiB per rank \(2 ranks share its memory\)"):
        memory_check.check_memory(preflight("train", ["hardware=cpu_ddp"]))
