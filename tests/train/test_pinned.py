"""Pinned numbers: a 3-iteration run of the tiny model from a fixed seed logs exactly these losses.

This is the guard that a refactor changes nothing. The values were recorded on the CPU build of torch
2.13.0, first from the code before the issue-11 refactor, then again when agentrl's own loss replaced
TRL's (issue 12): the first two iterations are unchanged; the third differs because TRL 1.16 weights
the KL term by the (differentiable) ratio by default, and verl does not, so the KL gradient of
iteration 2 changed. Issue 13 re-recorded all of them: the tiny model changed (Qwen2's pre-tokenization,
two heads of dimension 32 for vLLM's CPU kernels). A change that is meant to change training (a new tiny-model layout, a new loss
detail) re-records them in the same commit, and says so.

The tiny model here is the `+debug=fast` one (30 warm-up steps): it wins no episode in 3 iterations,
so the signal is the invalid-action penalty, and the KL term is on (0.05) so that the reference pass
is in the numbers too.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

RUN = [
    "train",
    "+debug=fast",
    "env.level=easy",
    "trainer.tasks_per_iteration=4",
    "trainer.group_size=4",
    "algo.kl_coef=0.05",
    "trainer.iterations=3",
    "trainer.eval_every=0",
    "logger=none",
]

# (train/loss, train/kl) per iteration, from `agentrl train <RUN> <OVERRIDES[name]>` with seed 0
PINNED = {
    "grpo": [
        (-0.0007972717867232859, 0.0),
        (0.0015290438896045089, 0.010149159680408646),
        (0.00121197325643152, 0.00935364382107534),
    ],
    "gigpo": [
        (-0.0015945435734465718, 0.0),
        (0.002602890832349658, 0.010154510693377758),
        (0.0020879129879176617, 0.0124899745956669),
    ],
    # verl-agent's schedule: 4 mini-batches of 32 rows, 2 epochs, 8 optimizer steps per iteration
    "gigpo-mini-batches": [
        (-0.0010792735265567899, 0.019656412712954614),
        (-0.0014836823102086782, 0.015060910456978034),
        (-0.002895649988204241, 0.022673973396642885),
    ],
}
OVERRIDES = {
    "grpo": ["+algo=grpo"],
    "gigpo": ["+algo=gigpo"],
    "gigpo-mini-batches": ["+algo=gigpo", "trainer.mini_batch_size=32", "trainer.epochs=2"],
}


@pytest.fixture(scope="module")
def own_cache(tmp_path_factory):
    """A cache of its own: env.level=easy builds a second household tiny model, which the session cache's
    other users do not expect to find there."""
    return tmp_path_factory.mktemp("pinned-cache")


@pytest.mark.parametrize("algo", list(PINNED))
def test_three_iterations_reproduce_the_pinned_losses(algo, own_cache, tmp_path):
    from tests.conftest import agentrl_cli

    run_dir = tmp_path / "run"
    result = agentrl_cli(own_cache, tmp_path, *RUN, *OVERRIDES[algo], f"hydra.run.dir={run_dir}", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = [(r["train/loss"], r["train/kl"]) for r in records if "train/loss" in r]
    assert len(logged) == len(PINNED[algo])
    for (loss, kl), (want_loss, want_kl) in zip(logged, PINNED[algo]):
        assert loss == pytest.approx(want_loss, abs=1e-6, rel=0)
        assert kl == pytest.approx(want_kl, abs=1e-6, rel=0)
