"""A checkpoint write that fails part-way with ENOSPC: the partial checkpoint is removed, the previous complete one
stays the newest, the run stops with one line that names the folder and the space a checkpoint needs, and the
resume from the previous checkpoint logs what an uninterrupted run logs.

The failure is injected (this machine has no size-limited filesystem to fill): torch.save writes a few bytes of
checkpoint-4's optimizer.pt, then raises OSError(ENOSPC), after the model's weights were written."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from agentrl.checkpoints import problem
from tests.conftest import cli_env, records_by_iteration
from tests.train.test_resume import COMMON, _command

pytestmark = pytest.mark.slow

INJECT = """
import errno, os, torch
real = torch.save
def save(obj, f, *args, **kwargs):
    if isinstance(f, (str, os.PathLike)) and "checkpoint-4" in str(f) and str(f).endswith("optimizer.pt"):
        with open(f, "wb") as out:
            out.write(b"part of an optimizer state")
        raise OSError(errno.ENOSPC, "No space left on device", str(f))
    return real(obj, f, *args, **kwargs)
torch.save = save
from agentrl.cli import app
app()
"""


def test_a_full_disk_keeps_the_previous_checkpoint_and_the_run_resumes(cache_dir, tmp_path):
    assert "trainer.save_every=2" in COMMON
    env, extra = cli_env(cache_dir), ["+algo=grpo"]
    straight = tmp_path / "straight"
    done = subprocess.run(_command(straight, extra), env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

    run_dir, inject = tmp_path / "full", tmp_path / "inject.py"
    inject.write_text(INJECT)
    command = [str(inject), *_command(run_dir, extra)[3:]]  # python inject.py train ...
    full = subprocess.run([sys.executable, *command], env=env, cwd=tmp_path, capture_output=True, text=True)
    lines = [line for line in full.stderr.splitlines() if line.strip()]
    assert full.returncode == 2, full.stderr[-3000:]
    assert "Traceback" not in full.stderr
    assert len(lines) == 1 and lines[0].startswith(
        f"error: no space left in {run_dir / 'checkpoints'} for checkpoint-4"
    )
    previous = run_dir / "checkpoints" / "checkpoint-2"
    assert "a checkpoint needs about " in lines[0] and f"the previous checkpoint {previous} is intact" in lines[0]
    checkpoints = run_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("checkpoint-*")) == ["checkpoint-2"]
    assert not (checkpoints / ".staging" / "checkpoint-4").exists(), "the partial checkpoint is removed"
    assert (checkpoints / "last").resolve() == previous.resolve() and problem(previous) is None

    resume = shlex.split(lines[0].split("then resume: ", 1)[1])
    resumed = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", *resume[1:]], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "(iteration 2)" in resumed.stdout
    assert records_by_iteration(run_dir) == records_by_iteration(straight)
