"""An environment whose observation is its whole log so far (tests/envs/toy_gym.py, `make_verbose`: 800 characters,
then 400 more a turn, as TextArena's games write it) builds the tiny model and trains under a memory ceiling.

The ceiling is RLIMIT_DATA on the run's process (its private writable memory): 4 GB, where the run peaks at about
1.3 GB resident. A build that trained on the whole log's ids (10,000 a prompt, the earlier budget) needed tens of
gigabytes for its warm-up's attention and logits."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from tests.conftest import cli_env

CEILING_BYTES = 4 * 10**9


def _ceiling() -> None:  # in the child, before it runs python
    resource.setrlimit(resource.RLIMIT_DATA, (CEILING_BYTES, CEILING_BYTES))


@pytest.mark.slow
def test_a_verbose_environment_builds_and_trains_under_a_memory_ceiling(tmp_path):
    run = tmp_path / "run"
    args = [
        "train",
        "env=gym",
        "env.factory=tests.envs.toy_gym:make_verbose",
        "+env.kwargs={max_turns:12}",
        "+debug=fast",
        "model.tiny.demo_turns=1000",
        "logger=none",
        f"hydra.run.dir={run}",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", *args],
        cwd=tmp_path,
        env=cli_env(tmp_path / "cache"),
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=_ceiling,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["iteration"] for r in records if "iteration" in r][-1] == 2
    build = json.loads(next((tmp_path / "cache" / "tiny").glob("gym-*/warmup.json")).read_text())
    assert build["demonstration_pairs"] >= 1000
