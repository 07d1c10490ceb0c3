"""Learning-health warnings (agentrl/health.py) on hand-built metrics records: each pattern is said once, when it
starts, names the keys to change, and stays silent on a run that learns."""

from __future__ import annotations

import json

from agentrl import health


def records(**columns) -> list[dict]:
    """One record per iteration 1..n from equal-length columns (None: the key is absent that iteration)."""
    n = len(next(iter(columns.values())))
    return [
        {"iteration": i + 1, **{key: values[i] for key, values in columns.items() if values[i] is not None}}
        for i in range(n)
    ]


def test_no_signal_when_most_of_the_last_iterations_had_little_and_once():
    # 4 task groups an iteration: 0.75 is one group with signal. Iterations 1-8 have a median
    # of 0.625, iterations 2-9 one of 0.75.
    shares = [0.25, 0.5, 0.75, 1.0, 0.5, 0.75, 0.75, 0.25, 1.0, 0.75, 0.75, 1.0]
    successes = [0.5, 0.4, 0.2, 0.0, 0.3, 0.1, 0.2, 0.4, 0.0, 0.1, 0.2, 0.0]
    run = records(**{"rollout/groups_without_signal": shares, "rollout/success": successes})
    said = [(r["iteration"], line) for r, line in _lines(run)]
    assert [i for i, _ in said] == [9]  # 10-12 say nothing more
    line = said[0][1]
    assert line.startswith(health.NO_SIGNAL) and "trainer.group_size" in line and "rollout.temperature" in line
    assert "median 75%" in line and "rollout success 0.20" in line  # the mean success of iterations 2-9
    # half the iterations with a group or two of signal: the median is 0.625, below the bar
    mixed = records(**{"rollout/groups_without_signal": [0.5, 0.75, 0.5, 1.0, 0.5, 0.75, 0.5, 1.0, 0.5, 0.75]})
    assert health.run_warnings(mixed) == []
    assert health.run_warnings(records(**{"rollout/groups_without_signal": [1.0] * 7})) == []  # not 8 yet


def test_entropy_collapse_against_the_first_iterations():
    entropies = [0.2, 0.18, 0.22, 0.2, 0.2, 0.1, 0.05, 0.03, 0.02]
    said = _lines(records(**{"train/entropy": entropies}))
    assert [r["iteration"] for r, _ in said] == [8]  # 0.03 < 0.2 x 0.2; 0.05 is not
    assert "algo.entropy.mode" in said[0][1] and "0.03" in said[0][1]


def test_heldout_drop_from_the_best_evaluation():
    evals = [0.0, None, 0.45, None, 0.4, 0.02, None, 0.36, 0.01]
    said = _lines(records(**{"eval/success": evals}))
    # 0.02 after a best of 0.45 (iteration 6) and again 0.01 after the recovery to 0.36 (iteration 9)
    assert [r["iteration"] for r, _ in said] == [6, 9]
    assert "0.02" in said[0][1] and "0.45" in said[0][1] and "trainer.learning_rate" in said[0][1]
    assert health.run_warnings(records(**{"eval/success": [0.1, 0.04, 0.5, 0.32]})) == []  # small or not halved


def test_a_run_that_learns_says_nothing():
    run = records(
        **{
            "rollout/groups_without_signal": [1.0, 0.9, 0.7, 0.5, 0.4, 0.3, 0.4, 0.3],
            "train/entropy": [0.5, 0.48, 0.45, 0.44, 0.4, 0.35, 0.3, 0.25],
            "eval/success": [0.1, None, None, 0.3, None, None, None, 0.5],
        }
    )
    assert health.run_warnings(run) == []


def test_report_lists_each_runs_warnings(tmp_path, capsys):
    from agentrl.report.compare import build_report, report_dict
    from agentrl.report.tables import warning_lines

    for name, evals in [("collapsed", [0.0, 0.45, 0.02]), ("fine", [0.0, 0.3, 0.5])]:
        folder = tmp_path / name
        folder.mkdir()
        lines = [json.dumps({"iteration": 25 * i, "eval/success": v}) for i, v in enumerate(evals)]
        (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    report = build_report(tmp_path)
    lines = warning_lines(report)
    assert len(lines) == 2 and lines[1].startswith("  collapsed: held-out drop")
    runs = {r["path"]: r for c in report_dict(report)["configurations"] for r in c["runs"]}
    assert runs["fine"]["warnings"] == [] and runs["collapsed"]["warnings"][0].startswith(health.HELDOUT_DROP)


def _lines(run: list[dict]) -> list[tuple[dict, str]]:
    """(the record, its line) for every line `warnings_at` gives as the records arrive one by one."""
    return [(run[end - 1], line) for end in range(1, len(run) + 1) for line in health.warnings_at(run[:end])]
