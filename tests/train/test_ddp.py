"""hardware=cpu_ddp: two CPU ranks over gloo, launched by agentrl through accelerate.

Both ranks must train on disjoint whole groups whose union is what one process trains on (the task
stream is seeded), and the run folder must look like a single-process run's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from safetensors import safe_open

from tests.conftest import agentrl_cli

pytestmark = pytest.mark.slow

SMALL = [
    "+debug=fast",
    "trainer.iterations=2",
    "trainer.save_every=2",
    "trainer.tasks_per_iteration=4",
    "trainer.group_size=2",
    "eval.num_tasks=4",
    "algo.kl_coef=0.01",
    "seed=3",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir):
    out = {}
    variants = (
        ("single", []),
        ("ddp", ["hardware=cpu_ddp"]),
        # also checkpointing, and a token budget of about one or two rows, so that the ranks' rows may pack into
        # different numbers of micro-batches, which they must agree on (or the gradient all-reduce hangs)
        (
            "ddp_mini_batches",
            [
                "hardware=cpu_ddp",
                "trainer.mini_batch_size=4",
                "trainer.gradient_checkpointing=true",
                "trainer.micro_batch_tokens=300",
            ],
        ),
    )
    for name, extra in variants:
        run_dir = tmp_path_factory.mktemp(name) / "r"
        result = agentrl_cli(
            cache_dir, run_dir.parent, "train", *SMALL, *extra, f"hydra.run.dir={run_dir}", timeout=900
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        out[name] = (run_dir, result)
    return out


def _tasks(run_dir: Path) -> dict[int, dict[int, list[str]]]:
    by_iteration: dict[int, dict[int, list[str]]] = defaultdict(dict)
    for line in (run_dir / "tasks.jsonl").read_text().splitlines():
        record = json.loads(line)
        by_iteration[record["iteration"]][record["rank"]] = record["tasks"]
    return by_iteration


def test_ranks_train_on_disjoint_whole_groups(runs):
    single, ddp = _tasks(runs["single"][0]), _tasks(runs["ddp"][0])
    assert sorted(ddp) == sorted(single) == [1, 2]
    for iteration, ranks in ddp.items():
        assert sorted(ranks) == [0, 1]
        assert ranks[0] and ranks[1], "each rank gets at least one group"
        assert not set(ranks[0]) & set(ranks[1]), "a group must not be split or shared across ranks"
        assert ranks[0] + ranks[1] == single[iteration][0], "together the ranks train on one process's groups"


def test_launched_through_accelerate(runs):
    _, result = runs["ddp"]
    assert "launching 2 ranks (ddp) through accelerate" in result.stdout
    assert "held-out success" in result.stdout


def test_same_structure_as_a_single_process_run(runs):
    (single_dir, _), (ddp_dir, _) = runs["single"], runs["ddp"]
    single = [json.loads(line) for line in (single_dir / "metrics.jsonl").read_text().splitlines()]
    ddp = [json.loads(line) for line in (ddp_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in ddp] == [r["iteration"] for r in single] == [0, 1, 2], "metrics are logged once"
    for a, b in zip(single, ddp):
        assert set(a) == set(b)
    for r in ddp[1:]:
        # rows are summed over ranks: 4 groups x 2 episodes, at least one turn each
        assert r["rollout/rows"] >= 8
    single_ckpt, ddp_ckpt = single_dir / "checkpoints" / "last", ddp_dir / "checkpoints" / "last"
    per_rank = {"agentrl_state_rank1.json", "rng_state_0.pth", "rng_state_1.pth", "rng_state.pth"}
    assert {p.name for p in single_ckpt.iterdir()} - per_rank == {p.name for p in ddp_ckpt.iterdir()} - per_rank
    assert (ddp_ckpt / "agentrl_state_rank1.json").is_file(), "each rank keeps its own state"
    assert [p.name for p in (ddp_dir / "checkpoints").iterdir() if p.name.startswith("checkpoint-")] == ["checkpoint-2"]
    with (
        safe_open(str(single_ckpt / "model.safetensors"), "pt") as a,
        safe_open(str(ddp_ckpt / "model.safetensors"), "pt") as b,
    ):
        assert set(a.keys()) == set(b.keys())
        for key in a.keys():
            assert a.get_slice(key).get_shape() == b.get_slice(key).get_shape()
    assert json.loads((ddp_dir / "result.json").read_text())["eval/success"] == ddp[-1]["eval/success"]


def test_resume_on_two_ranks(runs, tmp_path, cache_dir):
    """Both ranks resume from the one checkpoint (rank 1 from its own state file) and go on with the task stream."""
    import shutil

    from agentrl.envs.household import HouseholdSuite
    from agentrl.train.sampler import TaskSampler

    run_dir = tmp_path / "r"
    shutil.copytree(runs["ddp"][0], run_dir, symlinks=True)
    (run_dir / "tasks.jsonl").unlink()
    args = [a for a in SMALL if not a.startswith("trainer.iterations")]
    result = agentrl_cli(
        cache_dir,
        tmp_path,
        "train",
        *args,
        "hardware=cpu_ddp",
        "trainer.iterations=3",
        "trainer.resume=auto",
        f"hydra.run.dir={run_dir}",
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "resuming from" in result.stdout and "(iteration 2)" in result.stdout
    iterations = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == [0, 1, 2, 3]
    sampler = TaskSampler(HouseholdSuite("default"), "train", seed=3)
    expected = [[t.task_id for t in sampler.next(4)] for _ in range(3)][-1]
    ranks = _tasks(run_dir)
    assert list(ranks) == [3]
    assert ranks[3][0] + ranks[3][1] == expected


def test_mini_batches_on_two_ranks(runs):
    """Each rank takes 2 of every mini-batch's 4 rows; both take the same steps (or the collectives hang), also with
    gradient checkpointing and micro-batches packed to a token budget."""
    records = [json.loads(line) for line in (runs["ddp_mini_batches"][0] / "metrics.jsonl").read_text().splitlines()]
    steps = [r["train/optimizer_steps"] for r in records if "train/optimizer_steps" in r]
    assert len(steps) == 2
    assert all(s > 1 and s == int(s) for s in steps)  # the mean over ranks of equal counts
