"""Step-credit diagnostics on hand-built batches: sizes, non-zero shares, means, correlation, groups with no signal."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl.algos.credit_diagnostics import (
    CREDIT_METRICS,
    CreditRows,
    credit_metrics,
    credit_rows,
    nonzero_share,
    pearson,
    size_bucket_shares,
)
from agentrl.algos.gigpo import gigpo, gigpo_levels


def rows_of(episodes: list[tuple[int, list[tuple[str, float]]]]) -> dict:
    """Row columns from (group, [(anchor, reward) per step]) per episode; episode ids count from 0, all valid."""
    columns: dict[str, list] = {"group": [], "episode": [], "step": [], "reward": [], "valid": [], "anchor": []}
    for episode, (group, steps) in enumerate(episodes):
        for step, (anchor, reward) in enumerate(steps):
            for name, value in zip(columns, (group, episode, step, reward, True, anchor)):
                columns[name].append(value)
    return columns


def diagnostics(columns: dict, **options) -> dict[str, float]:
    levels = gigpo_levels(*(columns[k] for k in ("group", "episode", "step", "reward", "valid", "anchor")), **options)
    return credit_metrics(credit_rows(levels))


# Plain arithmetic: returns, no std, no discount, no penalty.
PLAIN = dict(norm="none", episode_stats="episodes", gamma=1.0, invalid_penalty=0.0)

# Group 0: a success (return 1) and a failure (0) that share their first state s0 only.
# Group 1: two failures from the same single state t0: no signal at either level.
TWO_GROUPS = [
    (0, [("s0", 0.0), ("s1", 1.0)]),
    (0, [("s0", 0.0), ("s2", 0.0)]),
    (1, [("t0", 0.0)]),
    (1, [("t0", 0.0)]),
]


def test_known_advantages_give_known_figures():
    # A^E = [.5, .5, -.5, -.5, 0, 0] (return - group mean); step returns (gamma 1) [1, 1, 0, 0, 0, 0];
    # step groups {s0: rows 0, 2}, {s1}, {s2}, {t0: rows 4, 5}, so A^S = [.5, 0, -.5, 0, 0, 0].
    columns = rows_of(TWO_GROUPS)
    levels = gigpo_levels(*(columns[k] for k in ("group", "episode", "step", "reward", "valid", "anchor")), **PLAIN)
    np.testing.assert_array_equal(levels.episode, [0.5, 0.5, -0.5, -0.5, 0, 0])
    np.testing.assert_array_equal(levels.step, [0.5, 0, -0.5, 0, 0, 0])
    m = credit_metrics(credit_rows(levels))
    assert set(m) == set(CREDIT_METRICS)
    assert m["step_group_size_1_share"] == 2 / 6  # rows of s1 and s2
    assert m["step_group_size_2_4_share"] == 4 / 6
    assert m["step_group_size_5_9_share"] == m["step_group_size_10_plus_share"] == 0.0
    assert m["step_advantage_nonzero_share"] == 2 / 6
    assert m["episode_advantage_abs_mean"] == pytest.approx(2 / 6)
    assert m["step_advantage_abs_mean"] == pytest.approx(1 / 6)
    # Both columns have mean 0: cov = .25 + .25, var(A^E) = 1, var(A^S) = .5 (sums), r = .5 / sqrt(.5).
    assert m["episode_step_advantage_correlation"] == pytest.approx(math.sqrt(0.5))
    assert m["episode_groups_no_signal_share"] == 0.5  # group 1
    assert m["step_groups_no_signal_share"] == 0.5  # t0 of {s0, t0}; singletons are not counted here


def test_the_levels_are_what_gigpo_adds():
    columns = rows_of(TWO_GROUPS)
    args = [columns[k] for k in ("group", "episode", "step", "reward", "valid", "anchor")]
    levels = gigpo_levels(*args, gamma=0.9)
    np.testing.assert_array_equal(gigpo(*args, gamma=0.9, step_weight=0.7), levels.episode + 0.7 * levels.step)
    assert gigpo_levels([], [], [], [], [], []) is None


def test_the_levels_of_a_team_keep_its_agents_apart():
    """Agents reach both levels: A^E takes ``norm_scope``, and step groups are keyed by (group, agent, anchor)."""
    columns = rows_of([(0, [("s", 0.0), ("s", 1.0)]), (0, [("s", 0.0), ("s", 0.0)])])
    args = [columns[k] for k in ("group", "episode", "step", "reward", "valid", "anchor")]
    team = dict(agent=["checker", "actor", "checker", "checker"], norm_scope="agent", gamma=0.9)
    levels = gigpo_levels(*args, **team)
    sizes = np.bincount(levels.step_group)[levels.step_group]
    np.testing.assert_array_equal(sizes, [3, 1, 3, 3])  # the actor's turn at "s" is alone
    np.testing.assert_array_equal(gigpo(*args, step_weight=0.7, **team), levels.episode + 0.7 * levels.step)
    one_agent = gigpo_levels(*args, gamma=0.9)
    assert one_agent.num_step_groups == 1 and not np.array_equal(one_agent.episode, levels.episode)


def test_known_group_sizes_give_known_shares():
    # One group of 10 episodes: all start at "start" (a step group of 10), then 6 go to x, 3 to y, 1 to z.
    second = ["x"] * 6 + ["y"] * 3 + ["z"]
    columns = rows_of([(0, [("start", 0.0), (anchor, float(i % 2))]) for i, anchor in enumerate(second)])
    m = diagnostics(columns)
    assert m["step_group_size_1_share"] == 1 / 20
    assert m["step_group_size_2_4_share"] == 3 / 20
    assert m["step_group_size_5_9_share"] == 6 / 20
    assert m["step_group_size_10_plus_share"] == 10 / 20


def test_size_bucket_edges():
    sizes = [1] + [2] * 2 + [4] * 4 + [5] * 5 + [9] * 9 + [10] * 10 + [11] * 11
    shares = size_bucket_shares(np.array(sizes))
    assert shares == {"1": 1 / 42, "2_4": 6 / 42, "5_9": 14 / 42, "10_plus": 21 / 42}
    assert all(math.isnan(v) for v in size_bucket_shares(np.zeros(0, dtype=int)).values())
    with pytest.raises(ValueError, match=">= 1"):
        size_bucket_shares([0, 1])


def test_all_success_and_singleton_groups_give_no_step_signal():
    # Every episode wins with the same rewards: equal returns everywhere, so nothing at either level.
    won = [(0, [("a", 0.0), ("b", 10.0)])] * 3 + [(1, [("c", 10.0)])] * 2
    m = diagnostics(rows_of(won), **PLAIN)
    assert m["episode_groups_no_signal_share"] == 1.0
    assert m["step_groups_no_signal_share"] == 1.0
    assert m["step_advantage_nonzero_share"] == 0.0
    assert m["episode_advantage_abs_mean"] == m["step_advantage_abs_mean"] == 0.0
    assert math.isnan(m["episode_step_advantage_correlation"])  # both columns constant: undefined, not 0

    # Every state visited once: a success and a failure, all rows in singleton step groups.
    alone = [(0, [("a", 0.0), ("b", 1.0)]), (0, [("c", 0.0), ("d", 0.0)])]
    m = diagnostics(rows_of(alone), **PLAIN)
    assert m["step_group_size_1_share"] == 1.0
    assert m["step_advantage_nonzero_share"] == 0.0 and m["step_advantage_abs_mean"] == 0.0
    assert m["episode_advantage_abs_mean"] == 0.5 and m["episode_groups_no_signal_share"] == 0.0
    assert math.isnan(m["step_groups_no_signal_share"])  # no step group of two rows to count
    assert math.isnan(m["episode_step_advantage_correlation"])


def test_the_invalid_penalty_gives_a_step_signal_between_equal_returns():
    # Equal episode returns, but one row at the shared state is invalid: its penalised step return is lower.
    columns = rows_of([(0, [("a", 0.0)]), (0, [("a", 0.0)])])
    columns["valid"] = [True, False]
    m = diagnostics(columns, norm="none", episode_stats="episodes", invalid_penalty=0.1)
    assert m["episode_groups_no_signal_share"] == 1.0  # returns before the penalty are equal
    assert m["step_groups_no_signal_share"] == 0.0
    assert m["step_advantage_nonzero_share"] == 1.0


def test_ranks_concatenate_to_the_whole_batch():
    first, second = TWO_GROUPS[:2], TWO_GROUPS[2:]
    parts = [credit_rows(gigpo_levels(*_args(rows_of(half)), **PLAIN)) for half in (first, second)]
    whole = credit_metrics(credit_rows(gigpo_levels(*_args(rows_of(TWO_GROUPS)), **PLAIN)))
    assert credit_metrics(CreditRows.concat(parts)) == pytest.approx(whole, nan_ok=True)
    empty = credit_metrics(CreditRows.concat([]))
    assert all(math.isnan(v) for v in empty.values())
    assert credit_metrics(CreditRows.concat([credit_rows(None), parts[0]])) == credit_metrics(parts[0])


def _args(columns: dict) -> list:
    return [columns[k] for k in ("group", "episode", "step", "reward", "valid", "anchor")]


def test_pearson():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson([1, -1, 1, -1], [1, 1, -1, -1]) == 0.0
    assert math.isnan(pearson([0.1, 0.1, 0.1], [1, 2, 3]))  # constant, though mean(x) - x is not exactly 0
    assert math.isnan(pearson([1.0], [2.0]))
    assert math.isnan(pearson([], []))
    with pytest.raises(ValueError, match="equal length"):
        pearson([1, 2], [1, 2, 3])


def test_nonzero_share():
    assert nonzero_share([0.0, -0.0, 1e-300, -2.0]) == 0.5
    assert math.isnan(nonzero_share([]))
