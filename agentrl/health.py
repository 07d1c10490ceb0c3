"""Why a run is not learning, said when it happens: four patterns read from the metrics records.

- **No signal.** The median of `rollout/groups_without_signal` over the last `NO_SIGNAL_ITERATIONS` iterations at
  or above `NO_SIGNAL_SHARE`: in most iterations most groups' episodes ended alike, so group-relative advantages
  are zero and the update has little to follow. A start that does not explore, or a level too hard (or too easy)
  for it. The median, not every iteration: with 4 task groups an iteration, one group that differs is already a
  share of 0.75, and a run that sits at 0.75 for many iterations learns little (SmolLM2's CPU recipe, docs/models.md).
- **Entropy collapse.** `train/entropy` below `COLLAPSE_FRACTION` of the mean of the run's first
  `ENTROPY_REFERENCE_ITERATIONS` iterations: the policy has become nearly deterministic, so a small update can
  flip its choice in a common state for every episode at once, and a group that then fails together gives no
  signal to come back.
- **Off-policy capped.** With rows generated ahead (`rollout.max_staleness >= 1`), an iteration whose decoupled-PPO
  correction dropped at least half its tokens (`off_policy/capped_share`): the update learns from the few left.
- **Held-out drop.** `eval/success` at or below `DROP_FRACTION` of the best evaluation so far, and at least
  `DROP_MIN` below it: the policy lost what it had learned.

`warnings_at(records)` gives the lines for the newest record, each pattern once when it starts; training logs them
(agentrl/train/callbacks.py) and `agentrl report` lists them per run (`run_warnings`). Each line names the keys that
change it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

NO_SIGNAL_SHARE = 0.75
NO_SIGNAL_ITERATIONS = 8
ENTROPY_REFERENCE_ITERATIONS = 5
COLLAPSE_FRACTION = 0.2
DROP_FRACTION = 0.5
DROP_MIN = 0.2

NO_SIGNAL = "no signal"
ENTROPY_COLLAPSE = "entropy collapse"
HELDOUT_DROP = "held-out drop"
OFF_POLICY_CAPPED = "off-policy capped"
CAPPED_SHARE_WARNING = 0.5  # an iteration's share of real tokens the off-policy correction dropped, at or above


def _values(records: Sequence[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(r["iteration"], r[key]) for r in records if r.get(key) is not None]


def no_signal(records: Sequence[dict[str, Any]]) -> str | None:
    shares = _values(records, "rollout/groups_without_signal")
    recent = shares[-NO_SIGNAL_ITERATIONS:]
    if len(recent) < NO_SIGNAL_ITERATIONS:
        return None
    median = statistics.median(share for _, share in recent)
    if median < NO_SIGNAL_SHARE:
        return None
    successes = [value for iteration, value in _values(records, "rollout/success") if iteration >= recent[0][0]]
    success = f", rollout success {statistics.fmean(successes):.2f}" if successes else ""
    return (
        f"{NO_SIGNAL}: at iteration {recent[-1][0]}, a median {median:.0%} of the task groups had no signal over "
        f"the last {NO_SIGNAL_ITERATIONS} iterations (every episode of a group ended alike{success}); a start that "
        "explores more (rollout.temperature, a shorter sft), more episodes per task (trainer.group_size) or an "
        "env.level that suits the policy give groups that differ"
    )


def entropy_collapse(records: Sequence[dict[str, Any]]) -> str | None:
    entropies = _values(records, "train/entropy")
    if len(entropies) <= ENTROPY_REFERENCE_ITERATIONS:
        return None
    reference = sum(e for _, e in entropies[:ENTROPY_REFERENCE_ITERATIONS]) / ENTROPY_REFERENCE_ITERATIONS
    iteration, now = entropies[-1]
    if reference <= 0 or now >= COLLAPSE_FRACTION * reference:
        return None
    return (
        f"{ENTROPY_COLLAPSE}: at iteration {iteration}, train/entropy {now:.3g} is below {COLLAPSE_FRACTION:.0%} of the "
        f"first iterations' {reference:.3g}; the policy is nearly deterministic. A lower trainer.learning_rate, an "
        "entropy term (algo.entropy.mode) or a KL to the start (algo.kl_coef) keep it exploring"
    )


def heldout_drop(records: Sequence[dict[str, Any]]) -> str | None:
    evaluations = _values(records, "eval/success")
    if len(evaluations) < 2:
        return None
    best_iteration, best = max(evaluations[:-1], key=lambda pair: pair[1])
    iteration, now = evaluations[-1]
    if now > DROP_FRACTION * best or best - now < DROP_MIN:
        return None
    return (
        f"{HELDOUT_DROP}: held-out success {now:.2f} at iteration {iteration}, down from {best:.2f} at iteration "
        f"{best_iteration}; a lower trainer.learning_rate or fewer optimizer steps per iteration "
        "(a larger trainer.mini_batch_size) make each update smaller"
    )


def off_policy_capped(records: Sequence[dict[str, Any]]) -> str | None:
    """The newest iteration's off-policy correction dropped most tokens (`off_policy/capped_share` at or above
    `off_policy.CAPPED_SHARE_WARNING`; rollout.max_staleness >= 1 only)."""
    shares = _values(records, "off_policy/capped_share")
    if not shares or "off_policy/capped_share" not in records[-1]:
        return None
    iteration, share = shares[-1]
    return capped_warning(iteration, share)


def capped_warning(
    iteration: int, capped_share: float | None, threshold: float = CAPPED_SHARE_WARNING, cap: float | None = None
) -> str | None:
    """The health line when the correction dropped at least `threshold` of an iteration's tokens, else None.

    Such an iteration learns from the few tokens left: the rows' behaviour policy is far from the policy that is
    trained. A smaller staleness, smaller steps or a larger cap keep more of them."""
    if capped_share is None or capped_share < threshold:
        return None
    limit = f" {cap:g}" if cap is not None else ""
    return (
        f"{OFF_POLICY_CAPPED}: at iteration {iteration}, the off-policy correction dropped {capped_share:.0%} of the "
        f"tokens (off_policy/capped_share; their behaviour weight was above the cap{limit}), so the update learns from "
        "the few left; a smaller rollout.max_staleness, a lower trainer.learning_rate or fewer optimizer steps per "
        "iteration (a larger trainer.mini_batch_size) keep the rollout's policy closer to the trained one, and a "
        "larger algo.off_policy.weight_cap keeps more tokens"
    )


CHECKS = {
    NO_SIGNAL: no_signal,
    ENTROPY_COLLAPSE: entropy_collapse,
    HELDOUT_DROP: heldout_drop,
    OFF_POLICY_CAPPED: off_policy_capped,
}


def warnings_at(records: Sequence[dict[str, Any]]) -> list[str]:
    """The lines for the newest record: each pattern that holds now and did not hold at the record before."""
    if not records:
        return []
    return [line for check in CHECKS.values() if (line := check(records)) and not check(records[:-1])]


def run_warnings(records: Sequence[dict[str, Any]]) -> list[str]:
    """Every line a run's records gave, in the order training logged them."""
    return [line for end in range(1, len(records) + 1) for line in warnings_at(records[:end])]
