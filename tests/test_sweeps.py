"""Hyper-parameter search with Optuna's sweeper (hparams_search=optuna): its search space is checked before
the first trial, a failed trial does not end the search, and a real two-trial search on the tiny model
reports the best job's final held-out success."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from agentrl.cli.launch import normalise_args, preflight
from agentrl.config.store import register_configs
from agentrl.errors import UserError
from tests.conftest import REPO

pytest.importorskip(
    "hydra_plugins.hydra_optuna_sweeper",
    reason="needs the sweep extra (hydra-optuna-sweeper): pip install -e '.[sweep]'",
)

SEARCHED = ("trainer.learning_rate", "algo.kl_coef", "rollout.temperature")


# --------------------------------------------------------------------------- the search space, before any trial


@pytest.fixture(autouse=True)
def _schemas():
    register_configs()


@pytest.mark.parametrize("args", [["hparams_search=optuna"], ["+hparams_search=optuna"]])
def test_search_space_passes_preflight(args):
    preflight("train", normalise_args(args), multirun=True)


@pytest.mark.parametrize(
    "override,expected",
    [
        (
            "trainer.learning_rat=tag(log, interval(1e-5, 1e-3))",
            "unknown config key 'trainer.learning_rat'; did you mean trainer.learning_rate?",
        ),
        ("rollout.temperatur=interval(0.5, 1.0)", "did you mean rollout.temperature?"),
        ("rollout.temperature=interval(0.0, 1.0)", "rollout.temperature must be > 0"),  # each end is checked
        ("trainer.group_size=interval(1, 8)", "trainer.group_size"),  # Optuna would hand it floats
        ("algo.kl_coef=interval(-0.1, 0.1)", "algo.kl_coef must be >= 0"),
    ],
)
def test_bad_sweep_on_the_command_line_is_one_line(override, expected):
    with pytest.raises(UserError) as err:
        preflight("train", ["+hparams_search=optuna", override], multirun=True)
    assert "\n" not in str(err.value) and expected in str(err.value)


def test_typo_in_a_search_space_file_is_one_line(tmp_path, monkeypatch):
    """A key misspelled in hydra.sweeper.params of a config file fails before the first trial."""
    import agentrl.cli.launch

    conf = tmp_path / "conf"
    shutil.copytree(agentrl.cli.launch.config_dir(), conf)
    text = (conf / "hparams_search" / "optuna.yaml").read_text()
    (conf / "hparams_search" / "mine.yaml").write_text(text.replace("algo.kl_coef:", "algo.kl_coeff:"))
    monkeypatch.setattr(agentrl.cli.launch, "config_dir", lambda: conf)
    with pytest.raises(UserError) as err:
        preflight("train", ["+hparams_search=mine"], multirun=True)
    assert str(err.value).startswith("unknown config key 'algo.kl_coeff'; did you mean algo.kl_coef")
    preflight("train", ["+hparams_search=mine"])  # without -m the sweeper is not used


def test_typo_in_a_sweep_ends_the_command_in_one_line(run_cli, tmp_path):
    result = run_cli(
        "train",
        "-m",
        "hparams_search=optuna",
        "trainer.learning_rat=tag(log,interval(1e-5,1e-3))",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2
    assert lines == ["error: unknown config key 'trainer.learning_rat'; did you mean trainer.learning_rate?"]
    assert not (tmp_path / "sweep").exists()


# --------------------------------------------------------------------------- failed trials (a stand-in job)

# The real sweeper, launcher and job wrapper around a job that fails on demand and returns
# rollout.temperature as its objective (it also writes it down, to compare with Optuna's choice).
FAKE_SWEEP = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from agentrl.errors import user_errors
    from agentrl.cli.launch import run_hydra

    fail_jobs = {int(n) for n in sys.argv[1].split(",") if n}
    nan_jobs = {int(n) for n in sys.argv[2].split(",") if n}

    def entry(cfg):
        from hydra.core.hydra_config import HydraConfig
        hc = HydraConfig.get()
        if hc.job.num in fail_jobs:
            raise RuntimeError(f"boom in job {hc.job.num}")
        value = float("nan") if hc.job.num in nan_jobs else float(cfg.rollout.temperature)
        Path(hc.runtime.output_dir, "objective.json").write_text(json.dumps(value))
        return value

    with user_errors():
        run_hydra("train", sys.argv[3:], entry)
""")


@pytest.fixture
def fake_sweep(tmp_path):
    script = tmp_path / "fake_sweep.py"
    script.write_text(FAKE_SWEEP)

    def run(trials: int, fail: str = "", nan: str = "", *extra: str):
        sweep = tmp_path / "sweep"
        env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
        env.pop("HYDRA_FULL_ERROR", None)
        result = subprocess.run(
            [
                sys.executable,
                str(script),
                fail,
                nan,
                "-m",
                "hparams_search=optuna",
                f"hydra.sweeper.n_trials={trials}",
                f"hydra.sweep.dir={sweep}",
                *extra,
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return result, sweep

    return run


def _objectives(sweep: Path) -> dict[int, float]:
    return {int(p.parent.name): json.loads(p.read_text()) for p in sweep.glob("*/objective.json")}


def test_failed_trial_is_recorded_and_the_search_goes_on(fake_sweep):
    result, sweep = fake_sweep(3, "0")
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1].startswith("error: 1 job(s) failed, the others finished; first: ")
    assert "boom in job 0" in json.loads((sweep / "0" / "FAILED.json").read_text())["error"]
    objectives = _objectives(sweep)
    assert sorted(objectives) == [1, 2]  # the trials after the failed one ran
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(max(objectives.values()))
    assert best["best_params"]["rollout.temperature"] == pytest.approx(best["best_value"])
    assert "Traceback" not in result.stderr


def test_nan_objective_is_a_failed_trial_not_the_end_of_the_search(fake_sweep):
    """optuna 2.x raises on a NaN value and its sweeper then fails; the job wrapper hands it None instead."""
    result, sweep = fake_sweep(2, "", "0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "job 0 has no objective (NaN)" in result.stderr
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(_objectives(sweep)[1])


def test_every_trial_failing_is_one_line(fake_sweep):
    result, sweep = fake_sweep(2, "0,1")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == f"error: all 2 job(s) failed; first: {sweep / '0'}: boom in job 0"
    assert "Traceback" not in result.stderr and "HYDRA_FULL_ERROR" not in result.stderr
    assert (sweep / "1" / "FAILED.json").is_file() and not (sweep / "optimization_results.yaml").exists()


def test_command_line_replaces_adds_and_fixes_dimensions(fake_sweep):
    result, sweep = fake_sweep(
        2, "", "", "rollout.temperature=interval(0.9,0.95)", "trainer.group_size=2,4", "algo.kl_coef=0.02"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for job in ("0", "1"):
        overrides = yaml.safe_load((sweep / job / ".hydra" / "overrides.yaml").read_text())
        settings = dict(o.split("=", 1) for o in overrides)
        assert 0.9 <= float(settings["rollout.temperature"]) <= 0.95
        assert settings["trainer.group_size"] in ("2", "4") and settings["algo.kl_coef"] == "0.02"
        assert 1e-5 <= float(settings["trainer.learning_rate"]) <= 1e-3


# --------------------------------------------------------------------------- a real search on the tiny model


@pytest.mark.slow
def test_two_trial_search_on_the_tiny_model(run_cli, tmp_path):
    sweep = tmp_path / "search"
    result = run_cli(
        "train",
        "-m",
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=2",
        "+debug=fast",
        "trainer.iterations=1",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]

    finals, params = [], []
    for job in ("0", "1"):
        records = [json.loads(line) for line in (sweep / job / "metrics.jsonl").read_text().splitlines()]
        assert records[-1]["iteration"] == 1 and "eval/success" in records[-1]
        finals.append(records[-1]["eval/success"])
        config = json.loads((sweep / job / "run.json").read_text())["config"]
        params.append({key: _select(config, key) for key in SEARCHED})
        assert 1e-5 <= params[-1]["trainer.learning_rate"] <= 1e-3
    assert params[0] != params[1], "the two trials should try different settings"

    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(max(finals))
    winner = finals.index(max(finals))  # Optuna keeps the first of equal values
    assert best["best_params"] == pytest.approx(params[winner])


def _select(config: dict, dotted: str):
    for part in dotted.split("."):
        config = config[part]
    return config
