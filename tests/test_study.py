"""The seed study's statistics (agentrl/report/study.py) on hand-built metric logs."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.report import study


def log(successes: dict[int, float], seconds_per_iteration: float = 2.0, credit: float | None = 0.5) -> list[dict]:
    """Records of a run that evaluated at the keys of `successes` (iteration 0 has no training time)."""
    records = []
    for it in range(max(successes) + 1):
        r = {"iteration": it}
        if it:
            r["time/iteration_s"] = seconds_per_iteration
            r["credit/step_advantage_nonzero_share"] = credit
        if it in successes:
            r["eval/success"] = successes[it]
        records.append(r)
    return records


def test_success_at_fixed_iterations_and_training_time():
    records = log({0: 0.1, 2: 0.3, 4: 0.5})
    assert study.evaluations(records) == [(0, 0.1), (2, 0.3), (4, 0.5)]
    assert study.success_at_iteration(records, 2) == 0.3
    assert study.success_at_iteration(records, 3) is None
    curve = study.timed_curve(records)
    assert curve == [(0.0, 0.1), (4.0, 0.3), (8.0, 0.5)]
    assert study.success_at(curve, 5.0) == 0.3  # the last evaluation at or before 5 s
    assert study.success_at(curve, 8.0) == 0.5
    assert study.success_at(curve, 9.0) is None  # the run stopped training before 9 s
    assert study.iterations_to(records, 0.3) == 2
    assert study.iterations_to(records, 0.6) is None


def test_credit_means_skip_null_values():
    records = log({0: 0.0, 3: 0.2}, credit=0.5)
    records[2]["credit/step_advantage_nonzero_share"] = None  # undefined at an iteration: left out, not zero
    records[3]["credit/step_advantage_nonzero_share"] = 0.8
    assert study.credit_means(records) == {"step_advantage_nonzero_share": pytest.approx(0.65)}


def test_bootstrap_difference_brackets_the_difference_and_separates_only_clear_cases():
    diff, low, high = study.bootstrap_difference([0.5, 0.6, 0.55, 0.5, 0.6], [0.2, 0.25, 0.3, 0.2, 0.25])
    assert diff == pytest.approx(0.31)
    assert 0 < low <= diff <= high
    assert study.verdict(low, high) == "better"
    diff, low, high = study.bootstrap_difference([0.1, 0.5, 0.3], [0.2, 0.4, 0.3])
    assert low < 0 < high and study.verdict(low, high) == "no separation"
    assert study.verdict(-0.3, -0.1) == "worse"


def test_bootstrap_interval_matches_a_direct_resampling():
    a, b = [0.2, 0.4, 0.9, 0.5], [0.1, 0.3, 0.2]
    _, low, high = study.bootstrap_difference(a, b, resamples=20_000, seed=3)
    rng = np.random.default_rng(11)
    diffs = [rng.choice(a, 4).mean() - rng.choice(b, 3).mean() for _ in range(20_000)]
    assert low == pytest.approx(np.quantile(diffs, 0.025), abs=0.02)
    assert high == pytest.approx(np.quantile(diffs, 0.975), abs=0.02)


def test_bootstrap_needs_two_seeds_per_arm():
    with pytest.raises(ValueError, match="at least 2 seeds"):
        study.bootstrap_difference([0.5], [0.1, 0.2])


def test_quantiles_and_a_teams_figures_per_agent():
    runs = [
        [
            {"iteration": 1, "train/grad_norm": 1.0, "rollout/agent/actor/advantage_mean": -0.2},
            {"iteration": 2, "train/grad_norm": 3.0, "rollout/agent/actor/advantage_mean": 0.0},
            {"iteration": 3, "train/grad_norm": None, "eval/agent/actor/success": 0.25},
        ],
        [{"iteration": 1, "rollout/agent/actor/advantage_mean": 0.4, "eval/agent/finisher/success": 0.5}],
    ]
    assert study.quantile_of(runs[0], "train/grad_norm", 1.0) == 3.0
    assert study.quantile_of(runs[0], "train/grad_norm", 0.5) == pytest.approx(2.0)
    assert study.quantile_of(runs[1], "train/grad_norm", 0.95) is None
    figures = study.agent_figures(runs)
    assert figures["actor"] == {"advantage_mean": [pytest.approx(-0.1), pytest.approx(0.4)], "success": [0.25]}
    assert figures["finisher"] == {"advantage_mean": [], "success": [0.5]}


def test_paired_gains_bracket_each_seeds_gain_and_separate_only_a_clear_one():
    rng = np.random.default_rng(1)
    start = (rng.random(100) < 0.4).astype(float)
    same = start.copy()
    better = np.maximum(start, rng.random(100) < 0.3)  # wins kept, about 18 more
    per_seed, mean = study.paired_gains(start, np.stack([same, better, better]))
    assert per_seed[0] == (0.0, 0.0, 0.0)  # an end equal to the start on every task: no gain, no spread
    gain, low, high = per_seed[1]
    assert gain == pytest.approx((better - start).mean()) and 0 < low < gain < high
    assert mean[0] == pytest.approx((2 * gain) / 3) and mean[1] <= mean[0] <= mean[2]
    assert mean[1] < per_seed[1][1]  # the seeds' spread (one seed gained nothing) widens the mean's interval


def test_paired_gains_over_independent_starts_pair_each_end_with_its_own_start_and_resample_the_starts():
    tasks = 60
    low_start, high_start = np.zeros(tasks), np.ones(tasks)
    half = (np.arange(tasks) % 2).astype(float)  # wins every other task
    starts = np.stack([low_start, high_start])  # two builds: one wins nothing, one everything
    ends = np.stack([half, high_start])  # the first gains 0.5 over its own start, the second keeps its 1.0
    per_start, mean = study.paired_gains(starts, ends)
    assert [gain for gain, _, _ in per_start] == [pytest.approx(0.5), 0.0]
    assert per_start[1] == (0.0, 0.0, 0.0)
    gain, low, high = mean
    assert gain == pytest.approx(0.25)
    # resampling the starts draws both as the first (about 0.5) or both as the second (0) a quarter of the time
    # each: the interval spans them, where a bootstrap over the tasks alone would sit within about 0.1 of 0.25
    assert low <= 0.01 and high >= 0.45


def test_paired_gains_refuse_a_start_that_does_not_pair_with_the_ends():
    with pytest.raises(ValueError, match="does not pair"):
        study.paired_gains(np.zeros((2, 10)), np.zeros((3, 10)))
    with pytest.raises(ValueError, match="does not pair"):
        study.paired_gains(np.zeros(9), np.zeros((3, 10)))
