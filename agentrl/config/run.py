"""The run schemas of `agentrl train` and `agentrl eval`: hardware, logging, the rollout backend (HF or vLLM), the
trainer's schedule and batch sizes, held-out evaluation, and the top-level `TrainConfig` and `EvalRunConfig`
that compose them with the env, model and algo sections."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from annotated_types import Ge, Gt, Interval, MinLen
from omegaconf import MISSING

from agentrl.config.algo import AlgoConfig
from agentrl.config.model import ModelConfig
from agentrl.config.values import (
    IMPORTANCE_SAMPLING_MODES,
    PORT,
    SEED,
    Backend,
    Device,
    LrSchedule,
    PolicyKind,
    Precision,
    Strategy,
    VllmMode,
    WandbMode,
    checked,
)
from agentrl.rollout.collector import TURNS


@dataclass
class HardwareConfig:
    """Where and how training runs. A hardware/ profile also picks rollout.backend. What this machine has (CUDA,
    GPUs, vLLM) is checked when a run starts, not when the config is composed (config/checks.py: check_host)."""

    device: Device = Device.cpu
    precision: Precision = Precision.fp32
    # training ranks of the run, on all its machines together (accelerate's --num_processes); > 1: agentrl starts
    # them through accelerate, hardware.num_processes / hardware.num_machines on each machine
    num_processes: int = checked(1, Ge(1))
    strategy: Strategy = Strategy.ddp  # with several processes: ddp, DeepSpeed ZeRO-2/3 or FSDP
    accelerate_config: str | None = checked(
        None, MinLen(1)
    )  # an accelerate config file; None: conf/accelerate/<strategy>.yaml
    # rendezvous port; None: a free one on one machine, 29500 on several (under Slurm, one from the job id)
    main_process_port: int | None = checked(None, PORT)
    # Several machines (docs/several_machines.md): one run over num_machines machines that share the run folder's
    # filesystem; each machine runs `agentrl train` with its own machine_rank (under Slurm, from the job: from_slurm)
    num_machines: int = checked(1, Ge(1))
    machine_rank: int = checked(0, Ge(0))  # this machine's place; machine 0 runs global rank 0
    main_process_ip: str | None = checked(None, MinLen(1))  # machine 0's address, which every machine reaches
    from_slurm: bool = False  # machine_rank and main_process_ip from the Slurm job (hardware=slurm sets it)
    # seconds the machines wait for each other at the start; a machine that has not come by then ends the others
    join_timeout_s: float = checked(600.0, Gt(0))


@dataclass
class LoggerConfig:
    wandb_mode: WandbMode = WandbMode.offline  # online needs WANDB_API_KEY
    project: str = checked("agentrl", MinLen(1))
    entity: str | None = checked(None, MinLen(1))
    group: str | None = checked(None, MinLen(1))  # None: a multirun's jobs share the sweep folder's name
    progress: bool = True  # the rich progress bar


@dataclass
class VllmConfig:
    """vLLM generation through TRL (rollout.backend=vllm); each key maps onto GRPOConfig's vllm_* option, but
    enforce_eager, which TRL does not take: agentrl gives it to the engines it builds or has TRL build."""

    mode: VllmMode = VllmMode.colocate
    # colocate: share of each GPU's memory vLLM may take; on vLLM's CPU build, share of the host memory node
    # the whole process may hold, trainer included (docs/vllm.md)
    gpu_memory_utilization: float = checked(0.3, Interval(gt=0, le=1))
    tensor_parallel_size: int = checked(1, Ge(1))  # colocate: GPUs one vLLM engine spans
    enable_sleep_mode: bool = False  # colocate: free vLLM's memory during the update
    max_model_length: int | None = checked(None, Ge(1))  # colocate: context length; None: the model's
    # colocate and `agentrl eval`: run the model without compiling it (vLLM's enforce_eager). An engine then starts
    # sooner; what it costs in generation depends on the model (docs/vllm.md, "Compiled or eager"). Server mode:
    # `trl vllm-serve --enforce_eager`
    enforce_eager: bool = False
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
    # hardware.precision=bf16 on a CPU only: generate the rollouts and the held-out evaluations on the bfloat16
    # rounding of the weights (the update keeps the fp32 ones under autocast). Faster (SmolLM2's CPU recipe on 2
    # cores: generation 68.4 -> 50.0 s an iteration), but the rows are sampled from the bf16 rounding of the policy
    # that is trained (docs/models.md, "Generating in bf16")
    generate_in_bf16: bool = False
    # K >= 1: a rollout worker generates iteration t+K's rows while iteration t updates, so iteration t trains on
    # the rows of the policy after max(0, t-1-K) updates, corrected by decoupled PPO (docs/architecture.md,
    # "Asynchronous rollouts"; docs/algorithms.md). 0: the synchronous loop
    max_staleness: int = checked(0, Interval(ge=0, le=8))
    # lockstep: each turn generates for every active episode in one call, then waits for all their environments.
    # ready: an episode's next turn is generated as soon as its environment has answered, batched with the others
    # ready then, so a slow step holds back its own episode only; the rows are the same in any timing, but are not
    # lockstep's (each turn samples from its own stream; docs/architecture.md, "Turns without lockstep"). Needs
    # env.num_workers >= 1, model.attn_implementation=eager, fp32 on a CPU, one rank (config/staleness.py)
    turns: str = checked("lockstep", TURNS)


@dataclass
class TrainerConfig:
    iterations: int = checked(200, Ge(1))
    tasks_per_iteration: int = checked(16, Ge(1))  # B groups per iteration
    group_size: int = checked(8, Ge(1))  # N episodes per task (2 or more for the group-based estimators)
    # train on a fixed pool of this many tasks (ARPO needs tasks to recur); None: the whole split
    task_pool: int | None = checked(None, Ge(1))
    learning_rate: float = checked(1e-6, Gt(0))
    # constant (verl's default), or falling linearly or on a cosine to 0 at the last iteration (one step an iteration)
    lr_schedule: LrSchedule = LrSchedule.constant
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
    # leave the rows whose advantage is 0 out of the update's forward and backward passes (and of the old log-probs'
    # pass): with algo.kl_coef 0 and no entropy term such a row's loss and gradient are exactly 0, and the loss's
    # token or row count still counts it, so the update is the same for less work. Ignored where it would not be
    # the same (a KL or entropy term) and on several ranks (each pass is a collective)
    skip_rows_without_advantage: bool = True


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
class EvalRunConfig:
    """`agentrl eval`: a checkpoint (or a baseline policy) on a split of an environment."""

    checkpoint: str | None = checked(None, MinLen(1))  # a checkpoint folder or a run folder (its last checkpoint)
    policy: PolicyKind = PolicyKind.checkpoint
    env: Any = MISSING
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output: str | None = checked(None, MinLen(1))  # default: <checkpoint>/eval-<split> or the Hydra run folder
    # `agentrl eval ... +experiment=NAME` writes the recipe's env and eval here (cli/eval_recipe.py); they win over
    # a checkpoint's run. `agentrl eval model=NAME` writes the model and rollout too: that model plays, zero-shot
    recipe_config: str | None = checked(None, MinLen(1))
    seed: int = checked(0, SEED)
