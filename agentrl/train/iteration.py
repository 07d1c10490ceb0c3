"""One training iteration's work, without TRL: tasks, rollout, ARPO replay, advantages and metrics.

The trainer (`agentrl/train/trainer.py`) calls `sample_tasks` and `score_rollout` from TRL's
`_generate_and_score_completions` hook and turns the result into tensors. What generates the replies
(HF `generate` or vLLM) is the trainer's business: it hands in a `rollout(tasks, group_size)` callable.
Everything here is plain Python and numpy over `StepBatch` (see docs/architecture.md, "One iteration").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.algos.credit_diagnostics import CreditRows, credit_metrics, credit_rows
from agentrl.algos.entropy import EntropyRegularizer
from agentrl.algos.gigpo import gigpo, gigpo_levels
from agentrl.algos.grpo import grpo, rloo
from agentrl.algos.replay import ReplayBuffer, ReplayRule
from agentrl.algos.step_groups import step_group_codes, step_group_metrics
from agentrl.envs.base import Task
from agentrl.envs.faults import check_fault_share
from agentrl.errors import UserError
from agentrl.ranks import rank_share
from agentrl.rollout.batch import StepBatch, summarize

log = logging.getLogger(__name__)
_warned_single_agent = False

Rollout = Callable[[Sequence[Task], int], StepBatch]  # (tasks, episodes per task) -> step rows
Gather = Callable[[list], list]  # every rank's items, in rank order


@dataclass
class ScoredRollout:
    """An iteration's rows after replay, their advantages, and the iteration's rollout metrics."""

    batch: StepBatch
    advantages: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- what the algorithm config builds


def make_replay_buffer(cfg: Any) -> ReplayBuffer | None:
    """ARPO's buffer when `algo.replay.enabled`, else None."""
    r = cfg.algo.replay
    if not r.enabled:
        return None
    rule = ReplayRule(r.max_return, r.success_threshold, r.fail_std, r.fail_mean)
    return ReplayBuffer(r.capacity, rule, seed=cfg.seed)


def make_entropy_regularizer(cfg: Any) -> EntropyRegularizer | None:
    """The entropy term (a bonus, or EPO smoothing) unless `algo.entropy.mode=none`."""
    e = cfg.algo.entropy
    if e.mode == "none":
        return None
    return EntropyRegularizer(
        e.mode,
        coef=e.coef,
        alpha=e.alpha,
        kappa_low=e.kappa_low,
        kappa_high=e.kappa_high,
        gamma_beta=e.gamma_beta,
        total_iterations=cfg.trainer.iterations,
    )


# --------------------------------------------------------------------------- tasks


def sample_tasks(cfg: Any, sampler: Any, rank: int, ranks: int) -> list[Task]:
    """This rank's task groups: every rank draws the same seeded stream, then takes its share of whole groups."""
    return rank_share(sampler.next(cfg.trainer.tasks_per_iteration), rank, ranks)


def record_tasks(run_dir: Path, iteration: int, rank: int, tasks: Sequence[Task]) -> None:
    """One line per iteration and rank in <run>/tasks.jsonl: which task groups each rank trained on."""
    line = json.dumps({"iteration": iteration, "rank": rank, "tasks": [t.task_id for t in tasks]})
    with (run_dir / "tasks.jsonl").open("a") as f:
        f.write(line + "\n")  # one short append per rank: whole lines even when ranks write at once


def filter_tasks(cfg: Any, suite: Any, sampler: Any, rollout: Rollout) -> None:
    """ARPO's task selection: keep the training tasks the base policy solves at least once in K tries."""
    r = cfg.algo.replay
    if not (r.enabled and r.filter_trials > 0):
        return
    indices = sampler.pool or sampler.stream(r.filter_candidates)
    indices = indices[: r.filter_candidates]
    tasks = [suite.task(sampler.split, i) for i in indices]
    batch = rollout(tasks, r.filter_trials)
    solved = {e.task_id for e in batch.episodes if e.won}
    kept = [i for i, task in zip(indices, tasks) if task.task_id in solved]
    print(
        f"task filter: the base policy solved {len(kept)} of {len(tasks)} training tasks in "
        f"{r.filter_trials} tries; training on those"
    )
    if not kept:
        raise UserError(
            f"algo.replay.filter_trials={r.filter_trials}: the base policy solved none of "
            f"{len(tasks)} training tasks; raise filter_trials or filter_candidates, or set it to 0"
        )
    sampler.restrict(kept)


# --------------------------------------------------------------------------- rollout -> advantages


def score_rollout(
    cfg: Any, batch: StepBatch, replay: ReplayBuffer | None, gather: Gather, iteration: int
) -> ScoredRollout:
    """Rollout metrics, ARPO replay, advantages and their metrics for this rank's rows.

    The rollout metrics cover every rank's own episodes (before replay); an iteration where more than
    `env.max_fault_share` of them faulted stops the run. Before the advantages, ARPO injects stored
    successes into all-fail groups and then stores this iteration's successes from the batch as it was
    before injection, as ARPO's `apply_replay` does.
    GiGPO's step groups are computed once, for every estimator: for GiGPO's advantages and for the
    step-credit diagnostics (`credit/*`, over every rank's rows; under GRPO and RLOO, those of the GiGPO
    that would have been computed from the same rows).
    """
    episodes = gather(batch.episodes)
    metrics = summarize(StepBatch(episodes=episodes), "rollout")
    check_fault_share(
        int(metrics.get("rollout/faults", 0)), len(episodes), cfg.env.max_fault_share, f"iteration {iteration}"
    )
    metrics["rollout/groups_without_signal"] = groups_without_signal(batch)
    if replay is not None:
        batch = replay.apply(batch)  # inject, then store from the batch before injection, as ARPO does
        metrics.update(replay.metrics())
    warn_agent_scope_without_team(cfg.algo, batch.agent)
    step_group = gigpo_step_groups(cfg.algo, batch)
    advantages = compute_advantages(cfg.algo, batch, step_group)
    if step_group is not None and cfg.algo.estimator == "gigpo":
        sizes = np.bincount(step_group)[step_group]
        metrics.update({f"gigpo/step_group_{k}": v for k, v in step_group_metrics(sizes).items()})
    credit = CreditRows.concat(gather([step_credit(cfg.algo, batch, step_group)]))
    metrics.update({f"credit/{k}": v for k, v in credit_metrics(credit).items()})
    metrics["rollout/rows"] = float(len(batch))
    metrics["rollout/advantage_abs_mean"] = float(np.abs(advantages).mean()) if len(advantages) else 0.0
    metrics.update(agent_advantage_metrics(batch.agent, advantages))
    return ScoredRollout(batch, advantages, metrics)


def warn_agent_scope_without_team(algo: Any, agents: Sequence[str]) -> bool:
    """Say once per process that algo.norm_scope=agent is the global scope where only one agent acts."""
    global _warned_single_agent
    if _warned_single_agent or algo.norm_scope != "agent" or len(set(agents)) > 1:
        return False
    _warned_single_agent = True
    log.warning(
        "algo.norm_scope=agent, but only agent %r acted in this batch: with one agent the agent scope is the "
        "global one (a team environment names its agents in Observation.agent; docs/environments.md, 'Teams')",
        next(iter(agents), "0"),
    )
    return True


def agent_advantage_metrics(agents: Sequence[str], advantages: np.ndarray) -> dict[str, float]:
    """A team's per-agent mean advantage and share of rows (`rollout/agent/<agent>/...`); nothing for one agent.

    Under a global baseline an agent's mean advantage carries the gap between its rows' mean score and the
    group's (Dr. MAS's mu_k - mu); `algo.norm_scope=agent` takes it to 0 in every group where the agent has more
    than one row.
    """
    names = sorted(set(agents))
    if len(names) < 2:
        return {}
    agents = np.asarray(agents)
    metrics = {}
    for name in names:
        mine = agents == name
        metrics[f"rollout/agent/{name}/advantage_mean"] = float(advantages[mine].mean())
        metrics[f"rollout/agent/{name}/row_share"] = float(mine.mean())
    return metrics


def step_anchors(algo: Any, batch: StepBatch) -> list:
    """GiGPO's anchor keys: the environment's state key (else the text), or the observation text."""
    return batch.observation if algo.gigpo.anchor == "observation" else batch.anchor


def gigpo_step_groups(algo: Any, batch: StepBatch) -> np.ndarray | None:
    """GiGPO's step-group code per row, for every estimator (the diagnostics read them); None for an empty batch.

    Under GRPO and RLOO `algo.gigpo` holds its defaults (config/checks.py refuses others), so these are the step
    groups GiGPO's defaults would form. A team's agents are kept apart, as in GiGPO's own grouping.
    """
    if not len(batch):
        return None
    a = batch.arrays()
    return step_group_codes(
        a["group"],
        step_anchors(algo, batch),
        algo.gigpo.similarity,
        episode=a["episode"],
        step=a["step"],
        agent=a["agent"],
    )


def step_credit(algo: Any, batch: StepBatch, step_group: np.ndarray | None) -> CreditRows:
    """This rank's rows for the step-credit diagnostics: GiGPO's two levels from the batch, whatever the estimator.

    The episode level A^E is GRPO's with the run's `algo.norm`, `episode_stats`, `norm_scope` and
    `invalid_penalty`, on the rows' agents (the advantage itself under GRPO, GiGPO's A^E under GiGPO; under RLOO,
    GRPO's form at `algo.norm=none`, not RLOO's leave-one-out). The step level A^S is GiGPO's with `algo.gigpo`
    (its defaults under GRPO and RLOO), over step groups that never mix agents.
    Under GiGPO this repeats the advantage's arithmetic, which is linear in the rows; the grouping is not repeated.
    """
    if step_group is None:
        return credit_rows(None)
    g = algo.gigpo
    levels = gigpo_levels(
        *_row_columns(batch),
        step_anchors(algo, batch),
        gamma=g.gamma,
        similarity=g.similarity,
        step_group=step_group,
        **_episode_level_options(algo, batch),
    )
    return credit_rows(levels)


def compute_advantages(algo: Any, batch: StepBatch, step_group: np.ndarray | None = None) -> np.ndarray:
    """The configured estimator's advantage per row (see docs/algorithms.md)."""
    return ESTIMATORS[algo.estimator](algo, batch, step_group)


def _row_columns(batch: StepBatch) -> tuple[np.ndarray, ...]:
    """The columns every estimator takes first: group, episode, step, reward, valid."""
    a = batch.arrays()
    return a["group"], a["episode"], a["step"], a["reward"], a["valid"]


def _baseline_options(algo: Any, batch: StepBatch) -> dict[str, Any]:
    """What GRPO, RLOO and GiGPO's episode level share: the statistics' samples and scope, the penalty, the agents."""
    return dict(
        episode_stats=algo.episode_stats,
        norm_scope=algo.norm_scope,
        invalid_penalty=algo.invalid_penalty,
        agent=batch.arrays()["agent"],
    )


def _episode_level_options(algo: Any, batch: StepBatch) -> dict[str, Any]:
    """GRPO's keys, which GiGPO's episode level shares."""
    return dict(norm=algo.norm, **_baseline_options(algo, batch))


def _grpo_advantages(algo: Any, batch: StepBatch, step_group: np.ndarray | None) -> np.ndarray:
    return grpo(*_row_columns(batch), **_episode_level_options(algo, batch))


def _gigpo_advantages(algo: Any, batch: StepBatch, step_group: np.ndarray | None) -> np.ndarray:
    g = algo.gigpo
    return gigpo(
        *_row_columns(batch),
        step_anchors(algo, batch),
        gamma=g.gamma,
        step_weight=g.step_weight,
        similarity=g.similarity,
        step_group=step_group,
        **_episode_level_options(algo, batch),
    )


def _rloo_advantages(algo: Any, batch: StepBatch, step_group: np.ndarray | None) -> np.ndarray:
    return rloo(*_row_columns(batch), **_baseline_options(algo, batch))


# `algo.estimator` -> (algo config, batch, GiGPO's step groups or None) -> one advantage per row
ESTIMATORS: dict[str, Callable[[Any, StepBatch, np.ndarray | None], np.ndarray]] = {
    "grpo": _grpo_advantages,
    "gigpo": _gigpo_advantages,
    "rloo": _rloo_advantages,
}


def groups_without_signal(batch: StepBatch) -> float:
    """Share of groups whose episodes all had the same return (no learning signal without penalties)."""
    by_group: dict[int, set] = {}
    for e in batch.episodes:
        by_group.setdefault(e.group, set()).add(round(e.ret, 6))
    return float(np.mean([len(v) == 1 for v in by_group.values()])) if by_group else 0.0
