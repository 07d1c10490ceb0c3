"""scripts/expert_agreement.py: a model's probability of its environment's expert's replies, beside the
context-blind reference."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, cli_env, tiny_model_folder

SCRIPT = REPO / "scripts" / "expert_agreement.py"
ENV = ["+debug=fast", "env.level=easy"]


def agreement(cache_dir, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=cli_env(cache_dir), capture_output=True, text=True, timeout=600
    )


def test_the_blind_reference_is_the_entropy_of_the_replies():
    sys.path.insert(0, str(REPO / "scripts"))
    from expert_agreement import blind_cross_entropy

    assert blind_cross_entropy(["a", "a", "a"]) == 0.0
    assert blind_cross_entropy(["a", "b", "a", "b"]) == pytest.approx(math.log(2))
    assert blind_cross_entropy(["a", "b", "c", "d"]) == pytest.approx(math.log(4))


@pytest.mark.slow
def test_a_model_is_scored_on_the_experts_held_out_turns(cache_dir):
    folder = tiny_model_folder(cache_dir, *ENV)
    result = agreement(cache_dir, str(folder), "--episodes", "4", "--overrides", *ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    turns = re.search(r"the expert: won 4 of 4 held-out episodes; their (\d+) turns scored", result.stdout)
    blind = re.search(r"context-blind reference: cross-entropy ([0-9.]+) nats", result.stdout)
    row = re.search(rf"{re.escape(str(folder))} \| ([0-9.]+) \| ([0-9.]+)", result.stdout)
    assert turns and blind and row, result.stdout
    probability, cross_entropy = map(float, row.groups())
    assert int(turns.group(1)) >= 4 and float(blind.group(1)) > 0
    # the mean probability of a reply is at least exp of minus the mean cross-entropy (Jensen), never above 1
    assert math.exp(-cross_entropy) - 1e-3 <= probability <= 1.0, (probability, cross_entropy)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/no/such/model", "--overrides", *ENV], "/no/such/model: not a model folder (no config.json)"),
        (["/no/such/model", "--overrides", "env=nowhere"], "--overrides:"),
    ],
)
def test_bad_input_is_one_line(cache_dir, args, message):
    result = agreement(cache_dir, *args)
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
