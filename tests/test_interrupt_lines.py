"""Ctrl-C during `agentrl eval` and `agentrl sft` ends with one line that says it stopped and what was kept, exit code
130, and nothing half-written: `agentrl eval` keeps the episodes that ended (trajectories.jsonl, a whole line each, as
after a SIGKILL) and writes eval.json only when it ends; `agentrl sft` writes its model only when it ends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import cli_env

pytestmark = pytest.mark.slow


def interrupted(cache_dir, cwd, *args: str, started: str) -> tuple[int, list[str]]:
    """Run `agentrl ARGS`, send SIGINT once an output line contains `started`; (exit code, the output's lines)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli", *args],
        cwd=cwd,
        env={**cli_env(cache_dir), "WANDB_MODE": "disabled"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # a suite started in the background (nohup, `&` in a script) hands its children Ctrl-C ignored, and a
        # process that starts with SIGINT ignored keeps it so; a user's terminal does not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    seen = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if started in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert seen.wait(300), "\n".join(lines[-20:])
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=60)
    reader.join(timeout=10)
    return code, [line for line in lines if line.strip()]


def whole_episode_lines(folder) -> list[dict]:
    """The episodes of trajectories.jsonl, each line whole (a line cut off by a SIGKILL is not a whole line)."""
    path = folder / "trajectories.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def test_ctrl_c_during_eval_says_it_stopped_and_keeps_the_ended_episodes(cache_dir, tmp_path):
    out = tmp_path / "eval"
    code, lines = interrupted(
        cache_dir,
        tmp_path,
        "eval",
        "--random",
        "eval.num_tasks=20000",
        f"hydra.run.dir={out}",
        started="from the command line:",  # the protocol is printed: the evaluation starts
    )
    assert code == 130, lines[-10:]
    assert lines[-1].startswith("agentrl eval: stopped on SIGINT; trajectories.jsonl holds the episodes that ended"), (
        lines[-10:]
    )
    assert "Traceback" not in "\n".join(lines)
    assert not (out / "eval.json").exists()
    assert all(e["task_id"].startswith("household/") for e in whole_episode_lines(out))


def test_a_killed_evaluation_keeps_the_episodes_it_finished(cache_dir, tmp_path):
    out = tmp_path / "eval"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli", "eval", "--random", "eval.num_tasks=3000", f"hydra.run.dir={out}"],
        cwd=tmp_path,
        env=cli_env(cache_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not whole_episode_lines(out):
        time.sleep(0.1)
    proc.kill()
    proc.wait(timeout=60)
    kept = whole_episode_lines(out)
    assert 0 < len(kept) < 3000 and not (out / "eval.json").exists()
    assert all(e["won"] for e in kept if e["length"] < 10)  # a household episode ends early only when it is won


def test_ctrl_c_during_sft_says_it_stopped_and_writes_no_model(cache_dir, tmp_path):
    run = tmp_path / "sft"
    code, lines = interrupted(
        cache_dir,
        tmp_path,
        "sft",
        "+debug=fast",
        "env.level=easy",
        "sft.episodes=24",
        "sft.epochs=200",  # long enough to be interrupted while fine-tuning
        "eval.num_tasks=8",
        f"hydra.run.dir={run}",
        started="sft: fine-tuning on the expert's actions: step",
    )
    assert code == 130, lines[-10:]
    assert lines[-1].startswith("agentrl sft: stopped on SIGINT; no model was written"), lines[-10:]
    assert "Traceback" not in "\n".join(lines)
    assert not (run / "model").exists() and not (run / "sft.json").exists() and (run / "run.json").is_file()


def test_the_first_ctrl_c_during_the_tiny_models_build_stops_at_once(tmp_path):
    """A fresh cache: `agentrl train model.tiny.shipped=false` starts by building the default tiny model (minutes;
    without the key it loads the shipped build). The first Ctrl-C ends the job within seconds with the "start
    again" line, leaves no half-built model in the cache, and the run folder says it stopped."""
    from agentrl.run_folder import run_status

    cache, run = tmp_path / "fresh-cache", tmp_path / "run"
    started = time.time()
    code, lines = interrupted(
        cache,
        tmp_path,
        "train",
        "logger=none",
        "model.tiny.shipped=false",
        f"hydra.run.dir={run}",
        started="tiny model: warm-up: step",
    )
    assert code == 130, lines[-10:]
    assert lines[-1].startswith("stopped on SIGINT before the first iteration; start again: agentrl train"), lines[-5:]
    assert "Traceback" not in "\n".join(lines)
    assert time.time() - started < 240  # the build alone takes about 2 minutes more
    assert not [p for p in (cache / "tiny").iterdir() if p.name.endswith(".tmp")]
    assert run_status(run)["status"] == "stopped"
