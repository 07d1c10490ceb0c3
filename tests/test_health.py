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


def test_no_signal_after_five_iterations_in_a_row_and_once():
    shares = [0.5, 0.95, 1.0, 0.9, 0.95, 0.92, 1.0, 1.0]
    run = records(**{"rollout/groups_without_signal": shares})
    said = [(r["iteration"], line) for r, line in _lines(run)]
    assert [i for i, _ in said] == [6]  # iterations 2-6 are five in a row; 7 and 8 say nothing more
    assert "trainer.group_size" in said[0][1] and said[0][1].startswith(health.NO_SIGNAL)
    broken = records(**{"rollout/groups_without_signal": [0.95, 1.0, 0.5, 1.0, 1.0, 0.9, 1.0]})
    assert health.run_warnings(broken) == []  # never five in a row


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
