"""A memory plan before the run: the estimated peak memory per device of a composed training config.

The peak is the memory that stays for the whole run plus the larger of the two phases of an iteration,
which never overlap (the rollout's generation buffers are freed before the update starts, and the update's
gradients are freed, `zero_grad(set_to_none=True)`, before the next rollout):

    peak = runtime + weights + optimizer + reference + vllm + max(update, generation, build)
    update = gradients + activations + lm_head
    generation = kv_cache + logprob_row + prefill + bf16_weights
    build = build_data + warmup   (the tiny model's build, where the run builds one before it starts)

Each term is a pure function below, its formula in its docstring. The shapes are a Hugging Face config.json's
(`ModelShape`); the sizes the config's (`Workload`). Sizes in bytes; b is the bytes of one value in
hardware.precision (4 for fp32, 2 for bf16/fp16). The plan is an upper bound in spirit: it sizes every
micro-batch and prompt at the config's maxima (max_prompt_tokens + max_new_tokens per row), which real
episodes rarely reach, and it counts the steady state: from the second optimizer step on, AdamW's moments
(and, from the second micro-batch of a step on, the gradients) are held while a micro-batch's activations are.
scripts/bench_memory.py compares it with measured peaks (docs/reproducing.md, "Memory per GPU").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GIB = 1024**3
FP32 = 4
# TRL 1.16's fused LM head (trl/kernels/chunked_logprob.py) projects TOKEN_TILE positions on VOCAB_TILE columns at once
TOKEN_TILE = 4096
VOCAB_TILE = 32768
# On CPU the head's tile arithmetic runs in torch (`_backward_tile`: the tile, y, z, log p, p, the gradient,
# the target mask as floats, and their difference and product): this many fp32 tiles at its peak. With Triton
# (CUDA) the kernels work in place on the one tile buffer.
CPU_HEAD_TILES = 9
# Saved for the backward pass, per token and layer, in values of b bytes: the normed inputs, q/k/v and their
# rotated copies (keys and values repeated to every head), the attention output and o_proj's input, and the
# residual stream: about 12 hidden-size vectors; the SwiGLU MLP keeps gate, up, silu(gate) and their product: 4
# intermediate-size vectors (Korthikanti et al. 2022's count, with a gated MLP and memory-efficient attention:
# no sequence-squared scores)
HIDDEN_VECTORS_PER_LAYER = 12
INTERMEDIATE_VECTORS_PER_LAYER = 4
# Qwen2's RMSNorm works in fp32 whatever the precision: with b < 4, two norms per layer keep two fp32 vectors each
NORM_FP32_VECTORS = 4
# Python, torch, tokenizers and the environments (CPU: measured ~0.8 GiB RSS before the model loads);
# on CUDA, the context the driver keeps on the device
RUNTIME_BYTES = {"cpu": GIB, "cuda": GIB // 2}
# The tiny model's build (agentrl/models/tiny.py): bytes its warm-up data set holds per token id (input ids and
# labels as Python lists, their Arrow copy, and one tokenizer chunk's record), measured on the tests' verbose
# environment (scripts/bench_build_memory.py), and characters of prompt text it keeps a token (rollout/prompts.py)
BUILD_BYTES_PER_ID = 160
BUILD_CHARS_PER_TOKEN = 8
# The warm-up's loss comes from the full logits (models/fine_tune.py, full_logits_trainer): the logits, their
# log-softmax and its gradient, each tokens x V in fp32
WARMUP_LOGIT_COPIES = 3
LORA_MODULE_SHAPES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelShape:
    """What the plan reads from a model's config.json."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    tied_embeddings: bool = True
    attention_bias: bool = True  # Qwen2's q/k/v projections have biases

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> ModelShape:
        heads = int(config["num_attention_heads"])
        return cls(
            vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            num_layers=int(config["num_hidden_layers"]),
            intermediate_size=int(config["intermediate_size"]),
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            tied_embeddings=bool(config.get("tie_word_embeddings", True)),
            attention_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
        )

    @property
    def kv_width(self) -> int:
        """Width of the key (or value) projection: key/value heads times the head dimension."""
        return self.num_kv_heads * (self.hidden_size // self.num_heads)

    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer of one decoder layer, by its PEFT target name."""
        h, i, kv = self.hidden_size, self.intermediate_size, self.kv_width
        return {
            "q_proj": (h, h),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (h, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }


def parameter_count(shape: ModelShape) -> int:
    """P = V*H (embedding) [+ V*H (LM head) when untied] + H (final norm) + L * (the layer's linear weights,
    q/k/v biases, and two norms of H)."""
    h = shape.hidden_size
    linear = sum(i * o for i, o in shape.module_shapes().values())
    bias = h + 2 * shape.kv_width if shape.attention_bias else 0
    layer = linear + bias + 2 * h
    embeddings = shape.vocab_size * h * (1 if shape.tied_embeddings else 2)
    return embeddings + h + shape.num_layers * layer


def lora_parameter_count(shape: ModelShape, rank: int, targets: list[str]) -> int:
    """Adapter parameters: L * sum over the targeted linear layers of r * (in + out) (A is r x in, B out x r)."""
    shapes = shape.module_shapes()
    return shape.num_layers * sum(rank * sum(shapes[t]) for t in targets if t in shapes)


@dataclass(frozen=True)
class Workload:
    """The config's sizes that the plan needs, per device (agentrl/memory/check.py: `workload` reads them from a
    composed config)."""

    bytes_per_value: int  # b
    device: str  # cpu or cuda
    micro_batch_rows: int  # rows of the largest micro-batch
    max_prompt_tokens: int
    max_new_tokens: int
    micro_batch_tokens: int | None = None  # the token budget, None: rows only
    gradient_checkpointing: bool = False
    reference: bool = False  # a frozen copy for the KL term (KL on, no LoRA)
    lora_rank: int | None = None  # None: every weight trains
    lora_targets: tuple[str, ...] = LORA_MODULE_SHAPES
    generation_rows: int = 0  # rows of one HF generate call (0: vLLM generates)
    vllm_bytes: int = 0  # what a colocated vLLM engine reserves
    shards: int = 1  # ZeRO-3 / FSDP split weights, gradients and moments over this many ranks
    optimizer_shards: int = 1  # ZeRO-2 splits gradients and moments only
    generate_in_bf16: bool = False  # rollout.generate_in_bf16: bf16 weights beside the fp32 ones while generating
    build_pairs: int = 0  # demonstration pairs of a tiny model the run builds first (0: it builds none)
    build_rows: int = 0  # rows of one warm-up step (model.tiny.warmup_batch_size)
    build_prompt_tokens: int = 0  # the build's prompt budget (model.tiny.max_prompt_tokens)

    @property
    def row_tokens(self) -> int:
        return self.max_prompt_tokens + self.max_new_tokens


def micro_batch_token_count(w: Workload) -> int:
    """T = rows * (max_prompt + max_new), at most the token budget, but never less than one row (a row longer than
    the budget goes alone)."""
    tokens = w.micro_batch_rows * w.row_tokens
    if w.micro_batch_tokens is not None:
        tokens = min(tokens, max(w.micro_batch_tokens, w.row_tokens))
    return tokens


def activation_bytes_per_token_layer(shape: ModelShape, b: int) -> int:
    """A = (12 H + 4 I) * b [+ 4 H * 4 when b < 4: the fp32 copies of Qwen2's RMSNorm]."""
    values = HIDDEN_VECTORS_PER_LAYER * shape.hidden_size + INTERMEDIATE_VECTORS_PER_LAYER * shape.intermediate_size
    norms = NORM_FP32_VECTORS * shape.hidden_size * FP32 if b < FP32 else 0
    return values * b + norms


def activations(shape: ModelShape, w: Workload) -> int:
    """Without checkpointing: T * L * A. With it, each layer keeps only its input (T * H * b) and one layer at a
    time is recomputed in the backward pass: T * (L * H * b + A)."""
    tokens, b = micro_batch_token_count(w), w.bytes_per_value
    per_layer = activation_bytes_per_token_layer(shape, b)
    if w.gradient_checkpointing:
        return tokens * (shape.num_layers * shape.hidden_size * b + per_layer)
    return tokens * shape.num_layers * per_layer


def head_positions(w: Workload) -> int:
    """N, the positions TRL's fused head scores: only the completion tokens, rows * max_new (at most T), on CUDA
    (TRL's Triton path) and on a CPU (agentrl/fused_head.py makes TRL take the same path there)."""
    return min(w.micro_batch_rows * w.max_new_tokens, micro_batch_token_count(w))


def lm_head(shape: ModelShape, w: Workload) -> int:
    """TRL 1.16 never materialises the (rows, tokens, V) logits: its fused head projects tiles of
    min(N, 4096) x min(V, 32768) and folds each into a running log-sum-exp. Its backward holds the tiles
    (k of them: 1 of b bytes on CUDA, 9 of fp32 on CPU where torch does the tile arithmetic), the fp32 gradient
    of the head's input N * H * 4 and, when the head trains, the fp32 gradient of its weight V * H * 4."""
    n = head_positions(w)
    tile = min(n, TOKEN_TILE) * min(shape.vocab_size, VOCAB_TILE)
    tiles = tile * w.bytes_per_value if w.device == "cuda" else tile * FP32 * CPU_HEAD_TILES
    weight_grad = shape.vocab_size * shape.hidden_size * FP32 if w.lora_rank is None else 0
    return tiles + n * shape.hidden_size * FP32 + weight_grad


def trainable(shape: ModelShape, w: Workload) -> tuple[int, int]:
    """(trainable parameters, bytes per value): every weight in b, or the LoRA adapter, which PEFT keeps in fp32."""
    if w.lora_rank is None:
        return parameter_count(shape), w.bytes_per_value
    return lora_parameter_count(shape, w.lora_rank, list(w.lora_targets)), FP32


def weights(shape: ModelShape, w: Workload) -> int:
    """P * b (/ shards under ZeRO-3 or FSDP), plus the LoRA adapter's own weights in fp32."""
    base = parameter_count(shape) * w.bytes_per_value // w.shards
    return base + (lora_parameter_count(shape, w.lora_rank, list(w.lora_targets)) * FP32 if w.lora_rank else 0)


def gradients(shape: ModelShape, w: Workload) -> int:
    """One gradient per trainable value, in its dtype (/ shards under ZeRO-2/3 or FSDP)."""
    count, size = trainable(shape, w)
    return count * size // (w.shards * w.optimizer_shards)


def optimizer(shape: ModelShape, w: Workload) -> int:
    """AdamW's two moments per trainable value. torch's AdamW makes them `zeros_like(param)`, and agentrl loads the
    weights in hardware.precision, so they are fp32 on CPU and bf16 on GPU (no fp32 master copy); fp32 for a
    LoRA adapter. (/ shards under ZeRO-2/3 or FSDP.)"""
    count, size = trainable(shape, w)
    return 2 * count * size // (w.shards * w.optimizer_shards)


def reference(shape: ModelShape, w: Workload) -> int:
    """The KL term's frozen copy, P * b, when algo.kl_coef > 0 without LoRA (with LoRA the reference is the base
    model with the adapter off: nothing more)."""
    return parameter_count(shape) * w.bytes_per_value // w.shards if w.reference else 0


def kv_cache(shape: ModelShape, w: Workload) -> int:
    """HF generate's cache: 2 (keys, values) * L * kv width * b per token, for rows * (max_prompt + max_new)."""
    return 2 * shape.num_layers * shape.kv_width * w.bytes_per_value * w.generation_rows * w.row_tokens


def logprob_row(shape: ModelShape, w: Workload) -> int:
    """The behaviour log-probs (agentrl/rollout/policies.py, `generate_with_logprobs`) are taken step by step: one
    fp32 log-softmax row of V per sequence, while the step's sampled token's value is read from it: rows * V * 4.
    (Generate's own per-step rows, the logits and the probabilities it samples from, are not counted.)"""
    return w.generation_rows * shape.vocab_size * FP32


def prefill(shape: ModelShape, w: Workload) -> int:
    """The prompt's forward pass without gradients: one layer's working set at a time, about
    rows * max_prompt * (4 H + 3 I) * b (hidden states, q/k/v and attention output, gate, up and their product)."""
    width = 4 * shape.hidden_size + 3 * shape.intermediate_size
    return w.generation_rows * w.max_prompt_tokens * width * w.bytes_per_value


def bf16_weights(shape: ModelShape, w: Workload) -> int:
    """With rollout.generate_in_bf16, the weights rounded to bf16 for generation, held beside the fp32 ones: P * 2.
    (Generation's key/value cache and prefill are then bf16 too; kv_cache and prefill still count them at b.)"""
    return parameter_count(shape) * 2 if w.generate_in_bf16 else 0


def build_data(w: Workload) -> int:
    """The build's demonstrations, at most pairs * (P + R) ids at BUILD_BYTES_PER_ID each, and their prompts' text,
    pairs * P * 8 characters (P: the build's prompt budget, R: a reply's max_new). Household's pairs average a quarter
    of the budget: the bound is for environments whose prompts fill it."""
    ids = w.build_pairs * (w.build_prompt_tokens + w.max_new_tokens) * BUILD_BYTES_PER_ID
    return ids + w.build_pairs * w.build_prompt_tokens * BUILD_CHARS_PER_TOKEN


def warmup(shape: ModelShape, w: Workload) -> int:
    """One warm-up step of rows * (P + R) tokens in fp32: T * L * A (as `activations`) plus the full logits' copies,
    T * V * 4 * 3."""
    tokens = w.build_rows * (w.build_prompt_tokens + w.max_new_tokens) if w.build_pairs else 0
    per_layer = activation_bytes_per_token_layer(shape, FP32)
    return tokens * (shape.num_layers * per_layer + shape.vocab_size * FP32 * WARMUP_LOGIT_COPIES)


@dataclass
class MemoryPlan:
    """The estimate's terms (bytes) and the peak they add up to."""

    terms: dict[str, int] = field(default_factory=dict)
    update: tuple[str, ...] = ("gradients", "activations", "lm_head")
    generation: tuple[str, ...] = ("kv_cache", "logprob_row", "prefill", "bf16_weights")
    build: tuple[str, ...] = ("build_data", "warmup")

    @property
    def update_bytes(self) -> int:
        return sum(self.terms.get(k, 0) for k in self.update)

    @property
    def generation_bytes(self) -> int:
        return sum(self.terms.get(k, 0) for k in self.generation)

    @property
    def build_bytes(self) -> int:
        return sum(self.terms.get(k, 0) for k in self.build)

    @property
    def staying_bytes(self) -> int:
        return sum(v for k, v in self.terms.items() if k not in self.update + self.generation + self.build)

    @property
    def peak(self) -> int:
        """Everything that stays, plus the largest phase: an iteration's update or generation, or the build."""
        return self.staying_bytes + max(self.update_bytes, self.generation_bytes, self.build_bytes)

    @property
    def larger_phase(self) -> str:
        phases = {"update": self.update_bytes, "generation": self.generation_bytes, "build": self.build_bytes}
        return max(phases, key=lambda name: phases[name])  # the first of equals: update


def plan(shape: ModelShape, w: Workload) -> MemoryPlan:
    """Every term for one device."""
    return MemoryPlan(
        {
            "runtime": RUNTIME_BYTES[w.device],
            "weights": weights(shape, w),
            "optimizer": optimizer(shape, w),
            "reference": reference(shape, w),
            "vllm": w.vllm_bytes,
            "gradients": gradients(shape, w),
            "activations": activations(shape, w),
            "lm_head": lm_head(shape, w),
            "kv_cache": kv_cache(shape, w),
            "logprob_row": logprob_row(shape, w),
            "prefill": prefill(shape, w),
            "bf16_weights": bf16_weights(shape, w),
            "build_data": build_data(w),
            "warmup": warmup(shape, w),
        }
    )


def largest_fitting_budget(shape: ModelShape, w: Workload, limit: int) -> int | None:
    """The largest trainer.micro_batch_tokens (a multiple of 256) whose plan peaks under `limit`, or None."""
    from dataclasses import replace

    def fits(budget: int) -> bool:
        return plan(shape, replace(w, micro_batch_tokens=budget)).peak <= limit

    low, high = 0, max(w.micro_batch_rows * w.row_tokens // 256, 1)
    if not fits(256):
        return None
    while low < high:  # the largest k with fits(256 * k), k in [1, high]
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(256 * mid) else (low, mid - 1)
    return 256 * max(low, 1)
