"""The `algo` section: the advantage estimator and its groups (GRPO, RLOO, GiGPO), ARPO's replay, the entropy term
and the policy loss's clipping and KL (docs/algorithms.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from annotated_types import Ge, Gt, Interval

from agentrl.config.values import (
    SHARE,
    AnchorKind,
    EntropyAggregation,
    EntropyMode,
    EpisodeStats,
    Estimator,
    LossAggregation,
    Norm,
    NormScope,
    checked,
)


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
class OffPolicyConfig:
    """The correction of rows generated ahead by an older policy (rollout.max_staleness >= 1): AReaL's decoupled
    PPO (agentrl/algos/off_policy.py; docs/algorithms.md, "Off-policy correction"). Unused at max_staleness=0."""

    # tokens whose behaviour weight pi_prox / pi_behav is above this get weight 0 (AReaL's behav_imp_weight_cap;
    # its examples: 5.0); None: no cap
    weight_cap: float | None = checked(5.0, Gt(1))


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
    off_policy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    clip_epsilon: float = checked(0.2, Interval(gt=0, lt=1))  # PPO clip
    clip_epsilon_high: float | None = checked(None, Gt(0))  # clip-higher (DAPO); None: symmetric
    kl_coef: float = checked(0.01, Ge(0))  # beta of the low-variance KL to the reference policy; 0 disables it
    # the per-token KL estimate is clamped to [-kl_clamp, kl_clamp] (verl); None: off
    kl_clamp: float | None = checked(10.0, Gt(0))
    # dual-clip PPO's c > 1 (verl clip_ratio_c): for A < 0 the loss is at most -c*A; None: off
    dual_clip: float | None = checked(3.0, Gt(1), hint="dual-clip PPO's c")
    loss_aggregation: LossAggregation = LossAggregation.token_mean
