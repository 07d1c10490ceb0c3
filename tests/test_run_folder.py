"""One run folder holds one run (agentrl/run_folder.py): the lock, the refusal, overwrite, resume's checks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrl import run_folder
from agentrl.cli.launch import preflight
from agentrl.errors import UserError


def _cfg(*overrides: str):
    return preflight("train", ["+debug=fast", *overrides])


def _earlier_run(folder, cfg_overrides=()):
    """A folder as a finished run leaves it: metrics, run.json, config.yaml, a checkpoint folder, its log."""
    from omegaconf import OmegaConf

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text('{"iteration": 0}\n{"iteration": 1}\n')
    (folder / "run.json").write_text("{}")
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(_cfg(*cfg_overrides), resolve=True))
    (folder / "checkpoints" / "checkpoint-1").mkdir(parents=True)
    (folder / "train.log").write_text("the earlier run's log\n")


def test_a_fresh_folder_is_taken_and_given_back(tmp_path):
    lock = run_folder.claim(tmp_path / "run", _cfg())
    held = json.loads((tmp_path / "run" / run_folder.LOCK).read_text())
    assert held["pid"] > 0 and held["host"]
    lock.release()
    assert not (tmp_path / "run" / run_folder.LOCK).exists()


def test_a_live_run_holds_its_folder(tmp_path):
    lock = run_folder.claim(tmp_path, _cfg())
    try:
        with pytest.raises(UserError) as err:
            run_folder.claim(tmp_path, _cfg())
        message = str(err.value)
        assert "\n" not in message
        assert message.startswith(f"{tmp_path} is in use by a live run (process ")
        assert "hydra.run.dir=" in message
    finally:
        lock.release()


def test_a_killed_runs_lock_does_not_block_the_folder(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    import socket

    (tmp_path / run_folder.LOCK).write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname()}))
    run_folder.claim(tmp_path, _cfg()).release()


def test_a_requeued_slurm_job_takes_over_its_own_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    (tmp_path / run_folder.LOCK).write_text(json.dumps({"pid": 1, "host": "node-elsewhere", "job": "4242"}))
    run_folder.claim(tmp_path, _cfg()).release()
    (tmp_path / run_folder.LOCK).write_text(json.dumps({"pid": 1, "host": "node-elsewhere", "job": "17"}))
    with pytest.raises(UserError, match="in use by a live run \\(process 1 on node-elsewhere\\)"):
        run_folder.claim(tmp_path, _cfg())


def test_a_second_run_into_a_finished_runs_folder_is_refused_and_changes_nothing(tmp_path):
    _earlier_run(tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    with pytest.raises(UserError) as err:
        run_folder.claim(tmp_path, _cfg())
    assert str(err.value) == (
        f"{tmp_path} already holds a run; continue it with trainer.resume=auto, start in another folder "
        "(hydra.run.dir=...), or replace it with trainer.overwrite=true"
    )
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before  # the lock went with the refusal


def _failed_start(folder):
    """A folder as a start that failed before its first iteration leaves it (a misspelt env.id)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text("{}")
    (folder / "config.yaml").write_text("seed: 0\n")
    (folder / "train.log").write_text("error: env.id='game:GuessTheNumbr-v0' is not a GEM id\n")
    run_folder.record_end(folder, "crashed", "env.id='game:GuessTheNumbr-v0' is not a GEM id")


def test_a_start_that_failed_before_its_first_iteration_does_not_hold_its_folder(tmp_path):
    _failed_start(tmp_path)
    assert run_folder.run_status(tmp_path)["status"] == "crashed"
    lock = run_folder.claim(tmp_path, _cfg())
    try:
        # the new run is the folder's run now: the failed start's end record is not its own
        assert not (tmp_path / run_folder.ENDED).exists()
        assert run_folder.run_status(tmp_path)["status"] == "running"
    finally:
        lock.release()


def test_a_start_that_logged_an_iteration_holds_its_folder(tmp_path):
    _failed_start(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n')
    with pytest.raises(UserError, match="already holds a run"):
        run_folder.claim(tmp_path, _cfg())
    assert run_folder.run_status(tmp_path)["status"] == "crashed"


def test_overwrite_replaces_the_earlier_run(tmp_path):
    _earlier_run(tmp_path)
    lock = run_folder.claim(tmp_path, _cfg("trainer.overwrite=true"))
    try:
        assert sorted(p.name for p in tmp_path.iterdir()) == [run_folder.LOCK, "train.log"]
        assert (tmp_path / "train.log").read_text() == ""
    finally:
        lock.release()


def test_overwrite_and_resume_together_are_refused(tmp_path):
    with pytest.raises(UserError, match="^trainer.overwrite=true replaces the run that trainer.resume"):
        run_folder.claim(tmp_path, _cfg("trainer.overwrite=true", "trainer.resume=auto"))


def test_resume_auto_with_only_damaged_checkpoints_does_not_restart_on_top(tmp_path):
    _earlier_run(tmp_path)  # its checkpoint-1 folder is empty: not a complete checkpoint
    with pytest.raises(UserError) as err:
        run_folder.claim(tmp_path, _cfg("trainer.resume=auto"))
    assert str(err.value).startswith(f"trainer.resume=auto: {tmp_path} holds a run whose checkpoints are all damaged")
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 2


def test_resume_auto_before_the_first_checkpoint_starts_again_in_place(tmp_path):
    _earlier_run(tmp_path)
    (tmp_path / "checkpoints" / "checkpoint-1").rmdir()  # stopped before its first save
    run_folder.claim(tmp_path, _cfg("trainer.resume=auto")).release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.log"]  # emptied: this run appends to it


def test_resume_auto_on_an_empty_folder_starts_fresh(tmp_path):
    run_folder.claim(tmp_path / "new", _cfg("trainer.resume=auto")).release()


@pytest.fixture
def complete_checkpoint(monkeypatch, tmp_path):
    """The earlier run's checkpoint counts as complete (what one is, is tests/train/test_checkpoints.py's job)."""
    monkeypatch.setattr(run_folder, "latest_complete", lambda folder: folder / "checkpoint-1")


def test_resume_with_the_runs_own_settings_goes_on(tmp_path, complete_checkpoint):
    _earlier_run(tmp_path)
    lock = run_folder.claim(tmp_path, _cfg("trainer.resume=auto", "trainer.iterations=9", "trainer.eval_every=3"))
    lock.release()


@pytest.mark.parametrize(
    "changed,listed",
    [
        (["+algo=gigpo"], "algo.estimator: grpo -> gigpo"),
        (["env.level=easy"], "env.level: default -> easy"),
        (["model.tiny.hidden_size=32"], "model.tiny.hidden_size: 64 -> 32"),
        (["seed=5"], "seed: 0 -> 5"),
    ],
)
def test_resume_with_settings_that_change_the_checkpoints_meaning_is_refused(
    tmp_path, complete_checkpoint, changed, listed
):
    _earlier_run(tmp_path, ["+algo=grpo"])
    with pytest.raises(UserError) as err:
        run_folder.claim(tmp_path, _cfg("trainer.resume=auto", *changed))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("trainer.resume: the checkpoint was trained with other settings (")
    assert listed in message
    assert not (tmp_path / run_folder.LOCK).exists()


def test_resuming_another_runs_checkpoint_into_a_folder_with_a_run_is_refused(tmp_path, complete_checkpoint):
    _earlier_run(tmp_path / "a")
    _earlier_run(tmp_path / "b")
    with pytest.raises(UserError, match="already holds a run; resume trainer.resume="):
        run_folder.claim(tmp_path / "b", _cfg(f"trainer.resume={tmp_path / 'a'}"))


@pytest.mark.slow
def test_the_cli_refuses_a_second_run_into_the_same_folder(run_cli, tmp_path):
    folder = tmp_path / "one"
    first = run_cli("train", "+debug=fast", "trainer.iterations=1", "logger=none", f"hydra.run.dir={folder}")
    assert first.returncode == 0, first.stderr[-2000:]
    assert run_folder.run_status(folder)["status"] == "finished"
    assert not (folder / run_folder.LOCK).exists()
    metrics = (folder / "metrics.jsonl").read_text()
    second = run_cli("train", "+debug=fast", "trainer.iterations=1", "logger=none", f"hydra.run.dir={folder}")
    assert second.returncode != 0
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert lines[-1] == (
        f"error: {folder} already holds a run; continue it with trainer.resume=auto, start in another folder "
        "(hydra.run.dir=...), or replace it with trainer.overwrite=true"
    )
    assert "Traceback" not in second.stderr
    assert (folder / "metrics.jsonl").read_text() == metrics
    assert not (folder / run_folder.LOCK).exists()


@pytest.mark.slow
def test_a_run_that_crashes_says_so_in_its_folder(run_cli, tmp_path):
    folder = tmp_path / "faulty"
    # every episode faults: the run stops with one line after its first rollout (README, "Resuming, faults")
    result = run_cli(
        "train", "+debug=fast", "env.fault_rate=0.99", "logger=none", f"hydra.run.dir={folder}", timeout=600
    )
    assert result.returncode != 0
    status = run_folder.run_status(folder)
    assert status["status"] == "crashed"
    assert status["line"] and status["line"] in result.stderr


@pytest.mark.slow
@pytest.mark.gem
def test_a_misspelt_env_id_leaves_the_folder_to_the_corrected_rerun(run_cli, tmp_path):
    folder = tmp_path / "fixed"
    first = run_cli("train", "+debug=fast", "env=gem", "env.id=game:GuessTheNumbr-v0", f"hydra.run.dir={folder}")
    assert first.returncode != 0 and "is not a GEM id" in first.stderr
    assert run_folder.run_status(folder)["status"] == "crashed"
    # the rerun reaches the environment again (misspelt once more, to stay quick), not the folder's refusal
    second = run_cli("train", "+debug=fast", "env=gem", "env.id=game:GuessTheNumbe-v0", f"hydra.run.dir={folder}")
    assert second.returncode != 0
    assert "already holds a run" not in second.stderr
    assert "game:GuessTheNumbe-v0" in second.stderr
