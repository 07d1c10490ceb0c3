"""`agentrl report`: grouping seeds into configurations, the numbers, the plot, report.json and the command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.errors import UserError
from agentrl.report.compare import (
    build_report,
    find_runs,
    group_runs,
    load_run,
    mean_std,
    report_dict,
    write_report_json,
)
from agentrl.report.plot import plot_curves
from agentrl.report.tables import (
    failed_lines,
    format_to_threshold,
    render_agent_table,
    render_table,
    render_tool_table,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(
    folder: Path,
    overrides: list[str] | None,
    evals: dict[int, float | None],
    *,
    iterations: int | None = None,
    failed: str | None = None,
    seed: int | None = None,
) -> Path:
    """A run folder as `agentrl train` writes it: metrics.jsonl (eval/success at `evals`), run.json, .hydra/overrides.yaml."""
    folder.mkdir(parents=True, exist_ok=True)
    last = iterations if iterations is not None else max(evals, default=0)
    lines = []
    for it in range(0, last + 1):
        record = {"iteration": it, "time/elapsed_s": 0.5 * it, "rollout/success": 0.1}
        if it in evals:
            record["eval/success"] = evals[it]
        lines.append(json.dumps(record))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if seed is None and overrides:
        seed = next((int(o.split("=")[1]) for o in overrides if o.startswith("seed=")), 0)
    (folder / "run.json").write_text(
        json.dumps({"command": "agentrl train", "config": {"seed": seed, "algo": {"name": "grpo"}}})
    )
    if overrides is not None:
        (folder / ".hydra").mkdir(exist_ok=True)
        (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides) or "[]\n")
    if failed is not None:
        (folder / "FAILED.json").write_text(
            json.dumps({"error": failed, "type": "RuntimeError", "overrides": overrides})
        )
    return folder


@pytest.fixture
def sweep(tmp_path) -> Path:
    """A multirun: gigpo x 3 seeds (finals 0.2/0.4/0.6), grpo x 1 seed, and one failed gigpo job."""
    root = tmp_path / "multirun" / "2026-11-21" / "12-00-00"
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    gigpo = ["+algo=gigpo", "trainer.iterations=60"]
    make_run(root / "0", ["+algo=gigpo", "seed=0", "trainer.iterations=60"], {0: 0.0, 20: 0.5, 40: 0.3, 60: 0.2})
    make_run(root / "1", ["+algo=gigpo", "seed=1", "trainer.iterations=60"], {0: 0.0, 20: 0.1, 40: 0.5, 60: 0.4})
    make_run(
        root / "2",
        ["+algo=gigpo", "seed=2", "trainer.iterations=60"],
        {0: 0.0, 20: 0.2, 40: 0.4, 60: 0.6, 61: None},
        iterations=61,
    )
    make_run(root / "3", ["+algo=grpo", "seed=0", "trainer.iterations=60"], {0: 0.0, 20: 0.1, 40: 0.2, 60: 0.3})
    failed = root / "4"
    (failed / ".hydra").mkdir(parents=True)
    (failed / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in [*gigpo[:1], "seed=3", gigpo[1]]))
    (failed / "FAILED.json").write_text(json.dumps({"error": "CUDA out of memory", "type": "RuntimeError"}))
    return root


def by_label(report):
    return {c.label: c for c in report.configs}


def test_grouping_drops_the_seed(tmp_path):
    make_run(tmp_path / "a", ["+algo=gigpo", "seed=0", "trainer.iterations=60"], {0: 0.1})
    make_run(tmp_path / "b", ["trainer.iterations=60", "+algo=gigpo", "seed=1"], {0: 0.2})  # other order, same config
    make_run(tmp_path / "c", ["+algo=grpo", "seed=0"], {0: 0.3})
    make_run(tmp_path / "d", ["seed=5"], {0: 0.4})
    make_run(tmp_path / "e", [], {0: 0.4})
    make_run(tmp_path / "plain", None, {0: 0.5})  # not made through Hydra: its own configuration
    runs = [load_run(p, tmp_path) for p in find_runs(tmp_path)]
    groups = {g.label: sorted(r.name for r in g.runs) for g in group_runs(runs)}
    assert groups == {
        "+algo=gigpo trainer.iterations=60": ["a", "b"],
        "+algo=grpo": ["c"],
        "(defaults)": ["d", "e"],
        "plain": ["plain"],
    }
    assert {r.name: r.seed for r in runs}["d"] == 5


def test_mean_and_sample_std_on_a_hand_case(sweep):
    report = build_report(sweep)
    gigpo = by_label(report)["+algo=gigpo"]
    assert len(gigpo.runs) == 3
    # finals 0.2, 0.4, 0.6 (a null after the last value is skipped): mean 0.4, sample std 0.2
    assert gigpo.final[0] == pytest.approx(0.4) and gigpo.final[1] == pytest.approx(0.2)
    # bests 0.5, 0.5, 0.6: mean 8/15, sample std sqrt(((1/30)^2 * 2 + (2/30)^2) / 2)
    assert gigpo.best[0] == pytest.approx(1.6 / 3)
    assert gigpo.best[1] == pytest.approx(math.sqrt(((0.5 - 1.6 / 3) ** 2 * 2 + (0.6 - 1.6 / 3) ** 2) / 2))
    assert gigpo.last_iteration == (60, 61)
    grpo = by_label(report)["+algo=grpo"]
    assert grpo.final == (pytest.approx(0.3), None)  # one seed: no std
    assert mean_std([]) == (None, None)

    console = Console(width=200, record=True)
    console.print(render_table(report))
    text = console.export_text()
    assert "0.400 ± 0.200" in text and "0.300 " in text and "ddof=1" in text
    assert "60–61" in text


def test_iterations_to_threshold_with_runs_that_never_reach_it(sweep):
    report = build_report(sweep, threshold=0.5)
    gigpo = by_label(report)["+algo=gigpo"]
    assert [r.to_threshold for r in gigpo.runs] == [20, 40, 60]
    assert format_to_threshold(gigpo) == "40"

    report = build_report(sweep, threshold=0.45)  # seed 0 at 20, seed 1 at 40, seed 2 at 60 (0.6)
    assert format_to_threshold(by_label(report)["+algo=gigpo"]) == "40"

    report = build_report(sweep, threshold=0.55)  # only seed 2 (0.6 at 60)
    gigpo = by_label(report)["+algo=gigpo"]
    assert gigpo.to_threshold_mean == 60 and gigpo.reached == 1
    assert format_to_threshold(gigpo) == "60 (1/3 reached)"
    assert format_to_threshold(by_label(report)["+algo=grpo"]) == "-"

    report = build_report(sweep, threshold=0.35)  # 20, 40, 40: a fractional mean
    assert format_to_threshold(by_label(report)["+algo=gigpo"]) == "33.3"


def test_failed_jobs_are_listed_and_not_counted(sweep, tmp_path):
    make_run(sweep / "5", ["+algo=grpo", "seed=1", "trainer.iterations=60"], {}, iterations=3)  # no eval records
    report = build_report(sweep)
    lines = failed_lines(report)
    assert lines[0].startswith("2 run(s) failed")
    assert any(line.strip().startswith("4 [+algo=gigpo]") and "CUDA out of memory" in line for line in lines)
    assert any(line.strip().startswith("5 [+algo=grpo") and "no eval/success records" in line for line in lines)
    assert len(by_label(report)["+algo=gigpo"].runs) == 3
    assert len(by_label(report)["+algo=grpo"].runs) == 1


def test_killed_job_and_half_written_line(sweep):
    (sweep / "6" / ".hydra").mkdir(parents=True)  # a multirun job that died before writing anything
    (sweep / "6" / ".hydra" / "overrides.yaml").write_text("- +algo=grpo\n- seed=7\n")
    with (sweep / "3" / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 61, "eval/succ')  # killed mid-write
    report = build_report(sweep)
    assert by_label(report)[
        "+algo=grpo trainer.iterations=60"
    ]  # job 6 lacks it: nothing is shared.final[0] == pytest.approx(0.3)
    assert any("6 [+algo=grpo]: no metrics.jsonl" in line for line in failed_lines(report))


def test_plot_is_a_png(sweep, tmp_path):
    out = plot_curves(build_report(sweep), tmp_path / "plots" / "curves.png")
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_mean_curve_uses_the_iterations_all_seeds_have(sweep):
    gigpo = by_label(build_report(sweep))["+algo=gigpo"]
    curve = gigpo.mean_curve()
    assert curve["iteration"] == [0, 20, 40, 60]
    assert curve["mean"] == pytest.approx([0.0, 0.8 / 3, 0.4, 0.4])
    assert curve["min"] == pytest.approx([0.0, 0.1, 0.3, 0.2]) and curve["max"] == pytest.approx([0.0, 0.5, 0.5, 0.6])


def test_report_json(sweep, tmp_path):
    report = build_report(sweep)
    path = write_report_json(report, tmp_path / "report.json", plot=tmp_path / "report.png")
    data = json.loads(path.read_text())
    assert data["metric"] == "eval/success" and data["threshold"] == 0.5
    configs = {c["label"]: c for c in data["configurations"]}
    gigpo = configs["+algo=gigpo"]
    assert gigpo["overrides"] == ["+algo=gigpo", "trainer.iterations=60"]
    assert gigpo["seeds"] == 3 and gigpo["failed"] == 1
    assert gigpo["final"]["mean"] == pytest.approx(0.4) and gigpo["final"]["std"] == pytest.approx(0.2)
    assert gigpo["iterations_to_threshold"] == {"mean": 40.0, "reached": 3, "runs": 3}
    assert gigpo["last_iteration"] == {"min": 60, "max": 61}
    assert [r["seed"] for r in gigpo["runs"]] == [0, 1, 2]
    assert configs["+algo=grpo"]["final"]["std"] is None
    assert data["failed"] == [{"path": "4", "configuration": "+algo=gigpo", "reason": "CUDA out of memory"}]
    assert report_dict(report)["plot"] is None


def test_user_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        build_report(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"no runs under .*empty \(looked for metrics.jsonl\)"):
        build_report(tmp_path / "empty")
    make_run(tmp_path / "run", ["seed=0"], {0: 0.1})
    with pytest.raises(
        UserError,
        match=r"eval/sucess was never logged .*did you mean eval/success.*logged: "
        r"eval/success, rollout/success, time/elapsed_s",
    ):
        build_report(tmp_path, metric="eval/sucess")
    with pytest.raises(UserError, match="must end with"):
        plot_curves(build_report(tmp_path), tmp_path / "curves.json")


def test_a_single_run_folder_and_another_metric(tmp_path):
    run = make_run(tmp_path / "10-00-00", None, {0: 0.0, 5: 1.0})
    report = build_report(run, metric="rollout/success", threshold=0.1)
    (config,) = report.configs
    assert config.label == "10-00-00" and config.runs[0].to_threshold == 0
    assert config.mean_curve()["iteration"] == [0, 1, 2, 3, 4, 5]


def test_cli_report(sweep, tmp_path):
    result = CliRunner().invoke(app, ["report", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "+algo=gigpo" in result.output and "+algo=grpo" in result.output and "trainer.iterations=60" in result.output
    assert "CUDA out of memory" in result.output
    png = sweep / "report.png"
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert json.loads((sweep / "report.json").read_text())["plot"] == str(png)
    assert result.output.strip().splitlines()[-1] == f"learning curves: {png}"

    out = tmp_path / "notes" / "gigpo.png"
    result = CliRunner().invoke(app, ["report", str(sweep), "--out", str(out), "--threshold", "0.55"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert json.loads(out.with_suffix(".json").read_text())["threshold"] == 0.55
    assert "1/3 reached" in result.output


def test_cli_missing_path_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nowhere")])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "does not exist" in lines[0]
    assert "Traceback" not in result.output

    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code != 0 and "no runs under" in result.output and "Traceback" not in result.output


def test_overrides_shared_by_every_configuration_leave_the_labels(tmp_path):
    """A sweep's fixed settings would repeat on every row; labels keep what sets a configuration apart."""
    from agentrl.report.compare import build_report

    for i, (algo, seed) in enumerate([("grpo", 0), ("gigpo", 0), ("grpo", 1)]):
        run = tmp_path / str(i)
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(
            f"- +algo={algo}\n- seed={seed}\n- env.level=multistep\n- trainer.iterations=60\n"
        )
        (run / "metrics.jsonl").write_text('{"iteration": 0, "eval/success": 0.1}\n')
    report = build_report(tmp_path)
    assert [c.label for c in report.configs] == ["+algo=grpo", "+algo=gigpo"]
    assert report.shared == ["env.level=multistep", "trainer.iterations=60"]


def make_credit_runs(root: Path) -> Path:
    """Two GRPO seeds and a GiGPO seed that logged the step-credit diagnostics; seed 1's correlation is null once."""
    for i, (algo, seed, nonzero) in enumerate([("grpo", 0, 0.2), ("grpo", 1, 0.4), ("gigpo", 0, 0.6)]):
        run = root / str(i)
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(f"- +algo={algo}\n- seed={seed}\n")
        lines = []
        for it in range(4):
            record = {"iteration": it, "eval/success": 0.1 * it}
            record |= {f"credit/step_group_size_{b}_share": 0.25 for b in ("1", "2_4", "5_9", "10_plus")}
            record |= {"credit/step_advantage_nonzero_share": nonzero, "credit/step_advantage_abs_mean": nonzero}
            record["credit/episode_step_advantage_correlation"] = None if (seed, it) == (1, 2) else 0.5 + 0.1 * seed
            lines.append(json.dumps(record))
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_report_json_has_the_credit_curves(tmp_path):
    data = report_dict(build_report(make_credit_runs(tmp_path)))
    grpo, gigpo = (c["credit"] for c in data["configurations"])
    assert grpo["credit/step_advantage_nonzero_share"] == {"iteration": [0, 1, 2, 3], "mean": pytest.approx([0.3] * 4)}
    # seed 1 logged null at iteration 2: the mean over both seeds leaves that iteration out
    assert grpo["credit/episode_step_advantage_correlation"] == {
        "iteration": [0, 1, 3],
        "mean": pytest.approx([0.55] * 3),
    }
    assert gigpo["credit/step_advantage_nonzero_share"]["mean"] == pytest.approx([0.6] * 4)
    assert "credit/episode_groups_no_signal_share" not in grpo  # never logged


def test_the_plot_has_the_credit_panels_where_they_were_logged(tmp_path):
    svg = plot_curves(build_report(make_credit_runs(tmp_path / "credit")), tmp_path / "credit.svg").read_text()
    titles = ["step-group sizes (share of steps)", "step signal", "advantage size", "episode vs step credit"]
    assert all(f"<!-- {title} -->" in svg for title in titles)
    assert "<!-- r(A_episode, A_step) -->" in svg  # a panel's legend names its metrics...
    assert "<!-- steps with A_step != 0 -->" in svg
    assert "task groups, all returns equal" not in svg  # ...those logged only
    assert "<!-- |A_step| -->" in svg and "not logged" not in svg
    sizes_only = tmp_path / "sizes"
    sizes_only.mkdir()
    (sizes_only / "metrics.jsonl").write_text(
        '{"iteration": 0, "eval/success": 0, "credit/step_group_size_1_share": 1}\n'
    )
    svg = plot_curves(build_report(sizes_only), tmp_path / "sizes.svg").read_text()
    assert svg.count("<!-- not logged -->") == 3 and "<!-- size 1 -->" in svg
    run = make_run(tmp_path / "plain", None, {0: 0.1, 1: 0.2})
    plain = plot_curves(build_report(run), tmp_path / "plain.svg").read_text()
    assert "<!-- eval/success -->" in plain and not any(title in plain for title in titles)


def test_the_credit_panels_draw_every_diagnostic_once():
    from agentrl.report.compare import CREDIT
    from agentrl.report.plot import CREDIT_PANELS

    drawn = [metric for _, _, _, metrics in CREDIT_PANELS for metric, _ in metrics]
    assert sorted(drawn) == sorted(CREDIT) and len(CREDIT) == 10


def test_a_team_is_broken_down_by_agent(tmp_path):
    """The last evaluation's per-agent figures, mean ± std over seeds, in report.json and a second table."""
    for seed, finisher in [(0, 0.6), (1, 0.8)]:
        run = make_run(tmp_path / f"s{seed}", ["env=household_team", f"seed={seed}"], {0: 0.1, 2: 0.4})
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        records[0] |= {"eval/agent/finisher/success": 0.0, "eval/agent/finisher/invalid_rate": 0.9}  # not the last
        records[2] |= {"eval/agent/finisher/success": finisher, "eval/agent/finisher/invalid_rate": 0.1 * seed}
        records[2] |= {"eval/agent/checker/success": 0.4, "eval/agent/checker/turn_share": 0.5}
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    report = build_report(tmp_path)
    [config] = report_dict(report)["configurations"]
    assert config["by_agent"]["finisher"]["success"] == {
        "mean": pytest.approx(0.7),
        "std": pytest.approx(0.1414, abs=1e-4),
    }
    assert config["by_agent"]["finisher"]["invalid_rate"]["mean"] == pytest.approx(0.05)
    assert config["by_agent"]["checker"] == {"success": {"mean": pytest.approx(0.4), "std": pytest.approx(0.0)}}
    console = Console(width=200, record=True)
    console.print(render_agent_table(report))
    text = console.export_text()
    assert "finisher" in text and "0.700 ± 0.141" in text and "0.050 ± 0.071" in text


def test_a_single_agent_run_has_no_agent_table(sweep):
    report = build_report(sweep)
    assert render_agent_table(report) is None
    assert all(c["by_agent"] == {} for c in report_dict(report)["configurations"])


def _ended(folder: Path, status: str, line: str | None = None) -> None:
    """What `agentrl train` writes when a run ends (agentrl/run_folder.py: record_end)."""
    from agentrl.run_folder import record_end

    record_end(folder, status, line)


def test_report_tells_finished_stopped_killed_and_crashed_runs_apart(tmp_path):
    """A finished run, one stopped by a signal, one killed without a word and one that crashed, all of one
    configuration: the crashed one is a failure (not a configuration at 0.000), the others are summarised and
    the two that did not finish are named with where they ended; report.json counts each kind."""
    overrides = ["+algo=grpo"]
    finished = make_run(tmp_path / "a", [*overrides, "seed=0"], {0: 0.0, 10: 0.5, 20: 0.6})
    _ended(finished, "finished", "held-out success 0.600")
    stopped = make_run(tmp_path / "b", [*overrides, "seed=1"], {0: 0.0, 10: 0.4})
    _ended(stopped, "stopped", "stopped on SIGINT after iteration 10 of 20")
    make_run(tmp_path / "c", [*overrides, "seed=2"], {0: 0.0}, iterations=4)  # killed: no ended.json
    crashed = make_run(tmp_path / "d", [*overrides, "seed=3"], {0: 0.0}, iterations=2)
    _ended(crashed, "crashed", "RuntimeError: boom")

    report = build_report(tmp_path)
    (config,) = report.configs
    assert sorted(r.run.name for r in config.runs) == ["a", "b", "c"]
    assert [(run.name, reason) for _, run, reason in report.failed] == [
        ("d", "crashed after iteration 2: RuntimeError: boom")
    ]
    assert report.counts() == {"finished": 1, "stopped": 1, "killed": 1, "running": 0, "crashed": 1}
    data = report_dict(report)
    assert data["runs"] == report.counts()
    assert len(data["failed"]) == 1
    statuses = {r["path"]: r["status"]["status"] for r in data["configurations"][0]["runs"]}
    assert statuses == {"a": "finished", "b": "stopped", "c": "killed"}

    from agentrl.report.tables import unfinished_lines

    lines = unfinished_lines(report)
    assert lines[0] == "runs: 1 finished, 1 stopped, 1 killed, 1 crashed"
    assert "  b [+algo=grpo]: stopped after iteration 10: stopped on SIGINT after iteration 10 of 20" in lines
    assert "  c [+algo=grpo]: killed after iteration 4" in lines


def test_a_run_whose_lock_is_held_by_a_live_process_is_running(tmp_path):
    import os
    import socket

    from agentrl.run_folder import LOCK

    run = make_run(tmp_path / "live", ["seed=0"], {0: 0.0}, iterations=3)
    (run / LOCK).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    assert load_run(run, tmp_path).status["status"] == "running"


def test_a_tool_run_counts_its_tool_use(tmp_path):
    """env=tools: calls and errors summed over each run's iterations, errors by kind (a kind a run never met counts
    0 there), errors over calls and turns per episode; mean ± std over seeds, in report.json and a third table."""
    logged = {
        0: [{"rollout/tool_calls": 4.0, "rollout/tool_errors": 2.0, "rollout/tool_errors/invalid_json": 2.0}] * 2,
        1: [
            {"rollout/tool_calls": 6.0, "rollout/tool_errors": 0.0},
            {"rollout/tool_calls": 2.0, "rollout/tool_errors": 1.0, "rollout/tool_errors/timeout": 1.0},
        ],
    }
    for seed, counts in logged.items():
        run = make_run(tmp_path / f"s{seed}", ["env=tools", f"seed={seed}"], {0: 0.1, 2: 0.4})
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for record, figures in zip(records[1:], counts):
            record |= figures | {"rollout/episode_length": 2.0 + seed}
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    report = build_report(tmp_path)
    [config] = report_dict(report)["configurations"]
    use = config["tool_use"]
    assert use["tool_calls"] == {"mean": pytest.approx(8.0), "std": pytest.approx(0.0)}
    assert use["tool_errors"]["mean"] == pytest.approx(2.5)  # 4 and 1
    assert use["tool_errors/invalid_json"]["mean"] == pytest.approx(2.0)  # 4 and 0
    assert use["tool_errors/timeout"]["mean"] == pytest.approx(0.5)  # 0 and 1
    assert use["error_share"]["mean"] == pytest.approx((4 / 8 + 1 / 8) / 2)
    assert use["turns_per_episode"]["mean"] == pytest.approx(2.5)
    console = Console(width=200, record=True)
    console.print(render_tool_table(report))
    text = console.export_text()
    assert "8.000 ± 0.000" in text and "2.500 ± 2.121" in text and "invalid_json 2, timeout 0.5" in text
    result = CliRunner().invoke(app, ["report", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "tool use in the rollouts" in result.output


def test_runs_without_tools_have_no_tool_table(sweep):
    report = build_report(sweep)
    assert render_tool_table(report) is None
    assert all(c["tool_use"] == {} for c in report_dict(report)["configurations"])
