"""Run records and metrics sinks: W&B online without credentials falls back to offline; secrets never land on disk."""

from __future__ import annotations

import json
import logging

from agentrl.config.envs import HouseholdEnvConfig
from agentrl.config.run import TrainConfig
from agentrl.metrics_log import read_records
from agentrl.tracking import Tracker, record_run

SECRET = "sk-this-must-never-be-written-0123456789"


def _cfg(**logger):
    cfg = TrainConfig()
    cfg.env = HouseholdEnvConfig()
    cfg.model.name = "tiny"
    cfg.logger.progress = False
    for key, value in logger.items():
        setattr(cfg.logger, key, value)
    return cfg


def test_online_without_credentials_logs_offline_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc with a W&B key
    (tmp_path / "run").mkdir()
    with caplog.at_level(logging.WARNING):
        tracker = Tracker(tmp_path / "run", _cfg(wandb_mode="online"), total_iterations=1)
    try:
        assert "no W&B credentials" in caplog.text
        assert tracker.wandb_run is not None and tracker.wandb_run.settings.mode == "offline"
        tracker.log(1, {"rollout/success": 0.5})
    finally:
        tracker.close()
    assert read_records(tmp_path / "run")[0]["rollout/success"] == 0.5


def test_api_keys_never_land_in_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    run_dir = tmp_path / "run"
    record_run(run_dir, _cfg(wandb_mode="disabled"))
    tracker = Tracker(run_dir, _cfg(wandb_mode="disabled"), total_iterations=1)
    tracker.log(1, {"rollout/success": 1.0})
    tracker.close()
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert written and all(SECRET not in p.read_text(errors="ignore") for p in written)
    assert "WANDB_API_KEY" not in json.dumps(json.loads((run_dir / "run.json").read_text()))


def test_disabled_wandb_starts_nothing(tmp_path):
    tracker = Tracker(tmp_path, _cfg(wandb_mode="disabled"), total_iterations=1)
    assert tracker.wandb_run is None
    tracker.close()
