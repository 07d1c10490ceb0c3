"""The structured config schema: every key agentrl reads, with its type and default.

The dataclasses are registered in Hydra's ConfigStore, so an unknown key or a
value of the wrong type fails at composition time. Semantic checks that types
cannot express (a group size of 1 with a group-based estimator, a setting that
cannot apply) live in ``agentrl/checks.py``.

Defaults follow the papers and reference code (docs/algorithms.md); the embedded
tiny-model recipe overrides a few of them in ``conf/model/tiny.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING


class Norm(str, Enum):
    """Advantage normalisation (docs/algorithms.md, GRPO): subtract the group mean, optionally divide by std."""

    none = "none"
    std = "std"


class EpisodeStats(str, Enum):
    """Where GRPO takes its group statistics: over step rows (reference code) or episodes (paper Eq. 3)."""

    rows = "rows"
    episodes = "episodes"


class Estimator(str, Enum):
    """The advantage estimator (agentrl/algos/advantages.py)."""

    grpo = "grpo"
    gigpo = "gigpo"
    rloo = "rloo"


class AnchorKind(str, Enum):
    """What makes two GiGPO step rows "the same state"."""

    state = "state"  # the environment's true-state key where it has one, else the observation text
    observation = "observation"  # the observation text, as the reference does


class EntropyMode(str, Enum):
    none = "none"
    bonus = "bonus"  # L = L_policy - coef * L_H
    epo = "epo"  # L = L_policy - coef * (L_H - beta_k * L_smooth) (EPO v2)


class EntropyAggregation(str, Enum):
    trajectory = "trajectory"  # mean over episodes of the mean over turns of the token mean (EPO)
    token = "token"  # mean over every completion token of the batch


class LossAggregation(str, Enum):
    """How per-token losses are reduced over a mini-batch (agentrl/algos/policy_loss.py: masked_total)."""

    token_mean = "token_mean"  # reference: mean over every completion token of the mini-batch
    seq_mean = "seq_mean"  # mean over the mini-batch's rows of each row's token mean


class Backend(str, Enum):
    """Who generates the rollouts: Hugging Face `generate` on the training model, or vLLM through TRL."""

    hf = "hf"
    vllm = "vllm"


# TRL's vllm_importance_sampling_mode values
IMPORTANCE_SAMPLING_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


class VllmMode(str, Enum):
    colocate = "colocate"  # a vLLM engine inside every training process, sharing its GPU
    server = "server"  # a separate `trl vllm-serve` process; rank 0 talks to it


class Strategy(str, Enum):
    """The multi-process engine; each has an accelerate config under conf/accelerate/."""

    ddp = "ddp"
    deepspeed_zero2 = "deepspeed_zero2"
    deepspeed_zero3 = "deepspeed_zero3"
    fsdp = "fsdp"


class Precision(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


class WandbMode(str, Enum):
    offline = "offline"
    online = "online"
    disabled = "disabled"


class PolicyKind(str, Enum):
    checkpoint = "checkpoint"
    random = "random"


# --------------------------------------------------------------------------- environments


@dataclass
class EnvConfig:
    """Keys every environment has; each environment's schema extends it."""

    name: str = MISSING
    history_length: int = 2  # last H observation/action pairs in the prompt (reference: 2)
    prompt_template: str = "alfworld"  # alfworld | compact (see agentrl/rollout/prompts.py)
    max_steps: int | None = None  # None: the environment's own default
    num_workers: int = 0  # environment worker processes; 0 runs them in the trainer's process
    step_timeout_s: float = 60.0  # a reset or step slower than this ends its episode as failed (worker replaced)
    fault_rate: float = (
        0.0  # probability that an episode's environment raises, at its reset or a step (fault injection for tests)
    )
    max_fault_share: float = 0.5  # an iteration whose share of faulted episodes is above this stops the run


@dataclass
class HouseholdEnvConfig(EnvConfig):
    name: str = "household"
    level: str = "default"  # easy | default | medium | multistep | long (see agentrl/envs/household.py)


@dataclass
class AlfworldEnvConfig(EnvConfig):
    name: str = "alfworld"
    max_steps: int | None = 50  # reference: 50
    data_dir: str | None = None  # a download laid out as json_2.1.1/...; None: $ALFWORLD_DATA, else generated games
    generated_per_type: int = 10  # synthetic games per task type and split, when there is no download
    generation_seed: int = 0


# --------------------------------------------------------------------------- models


@dataclass
class TinyModelConfig:
    """How the embedded tiny model is built; its cache key is every field here plus the env."""

    hidden_size: int = 64
    intermediate_size: int = 128  # MLP width; the update's cost is mostly here
    num_layers: int = 2
    num_heads: int = 2
    num_kv_heads: int | None = None  # None: num_heads (plain multi-head attention); fewer: grouped-query
    vocab_size: int = 1024
    warmup_steps: int = 1500  # supervised steps on random admissible actions (0: no warm-up)
    demo_turns: int = 4000  # turns of random admissible play that the tokenizer and the warm-up learn from
    warmup_batch_size: int = 32
    warmup_lr: float = 3e-3
    cache_dir: str | None = None  # default: $AGENTRL_CACHE or ~/.cache/agentrl
    seed: int = 0


@dataclass
class LoraConfig:
    """Train a PEFT LoRA adapter instead of every weight; the KL reference is the base model (adapter off)."""

    enabled: bool = False
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    merge_on_save: bool = False  # also write a merged full model next to each checkpoint's adapter


@dataclass
class ModelConfig:
    name: str = MISSING
    hub_id: str | None = None  # Hugging Face hub id
    path: str | None = None  # a local copy; wins over hub_id
    tiny: TinyModelConfig | None = None  # set only by model=tiny
    lora: LoraConfig = field(default_factory=LoraConfig)


# --------------------------------------------------------------------------- algorithm


@dataclass
class GigpoConfig:
    """GiGPO's step level (arXiv 2505.10978); read only with algo.estimator=gigpo."""

    gamma: float = 0.95  # discount of the step returns
    step_weight: float = 1.0  # omega: A = A_episode + omega * A_step
    anchor: AnchorKind = AnchorKind.state
    similarity: float | None = None  # (0, 1): group observation texts by difflib ratio instead of equality


@dataclass
class ReplayConfig:
    """ARPO's per-task replay of successful episodes (arXiv 2505.16282)."""

    enabled: bool = False
    capacity: int = 8  # successful episodes kept per task (FIFO)
    max_return: float = 10.0  # the environment's best episode return; scores are returns / max_return
    success_threshold: float = 0.1  # an episode is stored when its score is above this
    fail_std: float = 0.05  # a group is "all-fail" when its scores' population std is below this...
    fail_mean: float = 0.2  # ...and their mean is below this
    importance_correction: bool = False  # PPO ratio against the stored behaviour log-probs (reference: off)
    filter_trials: int = 0  # K > 0: train only on tasks the base policy solves at least once in K tries
    filter_candidates: int = 64  # training tasks tried by the filter (procedural splits have no fixed size)


@dataclass
class EntropyConfig:
    """Entropy regularisation: none, a plain bonus, or EPO smoothing (arXiv 2509.22576, v2)."""

    mode: EntropyMode = EntropyMode.none
    coef: float = 1e-3  # lambda (EPO) or the bonus coefficient (reference yaml: 0.001)
    aggregation: EntropyAggregation = EntropyAggregation.trajectory
    alpha: float = 0.1  # EPO: weight of the smoothing penalty (ALFWorld 0.1, ScienceWorld 0.05)
    kappa_low: float = 0.0  # EPO: band [kappa_low, kappa_high] * H-bar outside which entropy is penalised
    kappa_high: float = 2.0
    gamma_beta: float = 3.0  # EPO: beta_k = 1 + exp(-gamma_beta * k / floor(K/2))


@dataclass
class AlgoConfig:
    """The update: advantage estimator, replay, entropy term and policy loss. Defaults: GRPO as in verl-agent."""

    estimator: Estimator = Estimator.grpo
    norm: Norm = Norm.std  # reference norm_adv_by_std_in_grpo=True
    episode_stats: EpisodeStats = EpisodeStats.rows
    invalid_penalty: float = 0.1  # c: cost of a reply with no parsable action
    gigpo: GigpoConfig = field(default_factory=GigpoConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    entropy: EntropyConfig = field(default_factory=EntropyConfig)
    clip_epsilon: float = 0.2  # PPO clip
    clip_epsilon_high: float | None = None  # clip-higher (DAPO); None: symmetric
    kl_coef: float = 0.01  # beta of the low-variance KL to the reference policy; 0 disables it
    kl_clamp: float | None = 10.0  # the per-token KL estimate is clamped to [-kl_clamp, kl_clamp] (verl); None: off
    dual_clip: float | None = 3.0  # dual-clip PPO's c > 1 (verl clip_ratio_c): for A < 0 the loss is at most -c*A
    loss_aggregation: LossAggregation = LossAggregation.token_mean


# --------------------------------------------------------------------------- running


@dataclass
class HardwareConfig:
    """Where and how training runs. A hardware/ profile also picks rollout.backend."""

    device: Device = Device.cpu
    precision: Precision = Precision.fp32
    num_processes: int = 1  # training ranks on this machine; > 1: agentrl starts them through accelerate
    strategy: Strategy = Strategy.ddp  # with several processes: ddp, DeepSpeed ZeRO-2/3 or FSDP
    accelerate_config: str | None = None  # an accelerate config file; None: conf/accelerate/<strategy>.yaml
    main_process_port: int | None = None  # rendezvous port; None: a free one


@dataclass
class LoggerConfig:
    wandb_mode: WandbMode = WandbMode.offline  # online needs WANDB_API_KEY
    project: str = "agentrl"
    entity: str | None = None
    group: str | None = None  # None: a multirun's jobs share the sweep folder's name
    progress: bool = True  # the rich progress bar


@dataclass
class VllmConfig:
    """vLLM generation through TRL (rollout.backend=vllm); each key maps onto GRPOConfig's vllm_* option."""

    mode: VllmMode = VllmMode.colocate
    # colocate: share of each GPU's memory vLLM may take; on vLLM's CPU build, share of the host memory node
    # the whole process may hold, trainer included (docs/vllm.md)
    gpu_memory_utilization: float = 0.3
    tensor_parallel_size: int = 1  # colocate: GPUs one vLLM engine spans
    enable_sleep_mode: bool = False  # colocate: free vLLM's memory during the update
    max_model_length: int | None = None  # colocate: context length; None: the model's
    server_host: str = "0.0.0.0"  # server: where `trl vllm-serve` listens
    server_port: int = 8000
    server_timeout: float = 240.0  # server: seconds to wait for it to come up
    importance_sampling_correction: bool = True  # correct for vLLM/trainer log-prob mismatch (TRL)
    importance_sampling_mode: str = "sequence_mask"  # token_truncate | token_mask | sequence_truncate | sequence_mask
    importance_sampling_clip_max: float = 3.0


@dataclass
class RolloutConfig:
    backend: Backend = Backend.hf  # set by the hardware/ profile; hf is the only one on CPU
    vllm: VllmConfig = field(default_factory=VllmConfig)
    temperature: float = 1.0  # reference rollout temperature
    top_p: float = 1.0
    max_new_tokens: int = 128
    max_prompt_tokens: int = 2048  # longer prompts keep their end (the current observation)


@dataclass
class TrainerConfig:
    iterations: int = 200
    tasks_per_iteration: int = 16  # B groups per iteration
    group_size: int = 8  # N episodes per task
    task_pool: int | None = (
        None  # train on a fixed pool of this many tasks (ARPO needs tasks to recur); None: the whole split
    )
    learning_rate: float = 1e-6
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 64  # rows per forward/backward pass (memory only: the loss does not depend on it)
    mini_batch_size: int | None = None  # rows per optimizer step over all ranks (verl ppo_mini_batch_size); None: all
    epochs: int = 1  # passes over each iteration's rows (verl ppo_epochs); one optimizer step per mini-batch and pass
    save_every: int = 50  # iterations between checkpoints; the last iteration always saves
    eval_every: int = 25  # iterations between held-out evaluations; 0 disables; the end always evaluates
    keep_last: int = 3  # checkpoints kept on disk
    resume: str | None = None  # "auto": this run folder's newest complete checkpoint; or a checkpoint/run folder
    max_nonfinite_updates: int = (
        3  # consecutive updates with a non-finite loss or advantage that are skipped before the run stops
    )


@dataclass
class EvalConfig:
    split: str | None = None  # None: the environment's held-out split
    num_tasks: int = 50
    episodes_per_task: int = 1  # k of pass@k
    temperature: float = 0.4  # reference eval temperature
    greedy: bool = False
    seed: int = 1234


@dataclass
class TrainConfig:
    env: Any = MISSING  # typed by the env/<name> option's own schema
    model: ModelConfig = field(default_factory=ModelConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0


@dataclass
class EvalRunConfig:
    """`agentrl eval`: a checkpoint (or a baseline policy) on a split of an environment."""

    checkpoint: str | None = None  # a checkpoint folder or a run folder (its last checkpoint)
    policy: PolicyKind = PolicyKind.checkpoint
    env: Any = MISSING
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output: str | None = None  # default: <checkpoint>/eval-<split> or the Hydra run folder
    seed: int = 0


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="eval_schema", node=EvalRunConfig)
    cs.store(group="env", name="household_schema", node=HouseholdEnvConfig)
    cs.store(group="env", name="alfworld_schema", node=AlfworldEnvConfig)


def plain_value(value: Any) -> Any:
    """A config value as plain Python: an enum's value, a list for a ListConfig."""
    from omegaconf import ListConfig, OmegaConf

    if isinstance(value, ListConfig):
        return OmegaConf.to_container(value)
    return value.value if isinstance(value, Enum) else value
