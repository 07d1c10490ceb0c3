"""Progress in both modes: grep-able plain lines when output is not a terminal, the rich bar on a terminal."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.progress import Phase, TrainProgress, terminal

TRAIN_LINE = re.compile(
    r"^\[agentrl\] train iter=(\d+)/(\d+) s_per_iter=[\d.]+ eta=\d+:\d\d:\d\d success=[\d.]+"
    r"( heldout=[\d.]+@\d+)? elapsed=\d+:\d\d:\d\d$"
)


def test_a_string_buffer_is_not_a_terminal():
    assert not terminal(io.StringIO())


def test_plain_training_lines_carry_iteration_time_eta_and_both_successes():
    out = io.StringIO()
    progress = TrainProgress(4, stream=out, heartbeat_s=3600)
    progress.update(0, None, 0.25, 0)
    progress.update(1, 0.5, 0.25, 0)
    progress.update(2, 0.75, 0.5, 2)
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[agentrl] train start iterations=4 heldout=0.250"
    assert [TRAIN_LINE.match(line).group(1) for line in lines[1:]] == ["1", "2"]
    assert "success=0.500 heldout=0.250@0" in lines[1] and "success=0.750 heldout=0.500@2" in lines[2]


def test_a_resumed_run_counts_its_pace_from_its_own_first_iteration():
    out = io.StringIO()
    progress = TrainProgress(10, stream=out, heartbeat_s=3600)
    progress.update(7, 0.5)  # the first iteration after resuming from checkpoint 6
    progress.close()
    [line] = out.getvalue().splitlines()
    assert TRAIN_LINE.match(line) and " iter=7/10 " in line


def test_a_long_iteration_still_writes_a_line_at_the_heartbeat():
    out = io.StringIO()
    progress = TrainProgress(3, stream=out, heartbeat_s=0.2)
    progress.update(1, 0.5)
    time.sleep(5.5)  # the heartbeat thread looks every min(heartbeat_s, 5) s
    progress.close()
    beats = [line for line in out.getvalue().splitlines() if "running=" in line]
    assert beats and beats[0].startswith("[agentrl] train iter=2/3 running=0:00:0")


def test_a_slow_start_says_it_is_starting():
    out = io.StringIO()
    progress = TrainProgress(3, stream=out, heartbeat_s=0.2)
    time.sleep(5.5)
    progress.close()
    assert out.getvalue().splitlines()[0].startswith("[agentrl] train starting running=0:00:0")


def test_a_short_plain_phase_prints_only_its_done_line():
    out = io.StringIO()
    with Phase("tiny model: checking its replies", 10, stream=out) as phase:
        for _ in range(10):
            phase.advance()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[agentrl] tiny model: checking its replies: 10/10 (100%) done")


def test_a_long_plain_phase_prints_at_most_every_tenth_and_every_few_seconds(monkeypatch):
    """One unit a second for 20 units: tenths come every 2 s, lines at most every 5 s, then the done line."""
    now = [1000.0]
    monkeypatch.setattr("agentrl.progress.time.monotonic", lambda: now[0])
    out = io.StringIO()
    with Phase("tiny model: warm-up step", 20, stream=out, heartbeat_s=3600, min_gap_s=5) as phase:
        for step in range(20):
            now[0] += 1
            phase.advance(note=f"loss {1 / (step + 1):.3f}")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[agentrl] tiny model: warm-up step: 5/20 (25%) elapsed=0:00:05 | loss 0.200"
    assert [line.split(": ")[2].split()[0] for line in lines] == ["5/20", "10/20", "15/20", "20/20"]
    assert lines[-1] == "[agentrl] tiny model: warm-up step: 20/20 (100%) done elapsed=0:00:20"


def test_a_slow_plain_phase_still_says_it_is_alive(monkeypatch):
    """A unit that takes longer than the heartbeat gets a line even within a tenth."""
    now = [0.0]
    monkeypatch.setattr("agentrl.progress.time.monotonic", lambda: now[0])
    out = io.StringIO()
    with Phase("games", 100, stream=out, heartbeat_s=60, min_gap_s=5) as phase:
        now[0] += 61
        phase.advance()
    assert out.getvalue().splitlines()[0] == "[agentrl] games: 1/100 (1%) elapsed=0:01:01"


def test_a_failed_phase_does_not_claim_to_be_done():
    out = io.StringIO()
    with pytest.raises(RuntimeError), Phase("games", 5, stream=out) as phase:
        phase.advance()
        raise RuntimeError("engine broke")
    assert "done" not in out.getvalue()


@pytest.mark.slow
def test_a_training_run_in_a_log_writes_one_line_per_iteration(run_cli, tmp_path):
    result = run_cli("train", "+debug=fast", "trainer.iterations=3", f"hydra.run.dir={tmp_path / 'r'}")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("[agentrl] train")]
    assert lines[0].startswith("[agentrl] train start iterations=3 heldout=")
    assert [TRAIN_LINE.match(line).group(1) for line in lines[1:]] == ["1", "2", "3"]
    assert "━" not in result.stdout  # no rich bar drawn into the log
    curves = tmp_path / "r" / "curves.png"
    assert result.stdout.splitlines()[-1].endswith(f" | learning curves {curves}"), "the last line names the picture"
    assert curves.read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (POSIX)")
def test_a_training_run_on_a_terminal_draws_the_rich_bar(cache_dir, tmp_path):
    """The same run with its output on a pseudo-terminal: the rich bar, and no plain lines."""
    repo = Path(__file__).resolve().parents[1]
    controller, terminal_end = os.openpty()
    env = {**os.environ, "AGENTRL_CACHE": str(cache_dir), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(repo)}
    env.pop("FORCE_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli", "train", "+debug=fast", f"hydra.run.dir={tmp_path / 'r'}"],
        stdout=terminal_end,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    os.close(terminal_end)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process has ended
            break
        if not chunk:
            break
        seen += chunk
    stderr = process.communicate(timeout=600)[1]
    os.close(controller)
    assert process.returncode == 0, stderr[-3000:]
    text = seen.decode(errors="replace")
    assert "━" in text and "train" in text
    assert "[agentrl] train iter=" not in text
