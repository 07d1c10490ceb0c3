"""scripts/reproduce_recipe.py: a recipe's header commands run per independent start, then its row of figures.

The dry runs print each recipe's commands (fast); the slow tests run the real commands end to end on settings that
make every phase take seconds, and check the row's shape and that each start was seeded by its own seed.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agentrl.cli.recipes import shipped_recipes
from tests.conftest import REPO, cli_env

SCRIPT = REPO / "scripts" / "reproduce_recipe.py"
WITH_START = [recipe.name for recipe in shipped_recipes() if recipe.start]


def reproduce(cache_dir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=cli_env(cache_dir), capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("name", WITH_START)
def test_the_dry_run_prints_each_starts_commands_seeded_by_it_and_composable(name, cache_dir, tmp_path):
    from agentrl.config.store import compose_config

    result = reproduce(cache_dir, name, "--starts", "0", "4", "--dry-run", "--tasks", "7", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines() if line.startswith("agentrl ")]
    assert not list(tmp_path.iterdir()), "a dry run writes nothing"
    for seed in (0, 4):
        folder = tmp_path / f"start_{seed}"
        mine = [words for words in commands if any(str(folder) in word for word in words)]
        kinds = [words[1] for words in mine]
        assert kinds in (["sft", "eval", "train", "eval"], ["eval", "train", "eval"]), kinds
        for words in mine:
            assert "seed=S" not in words and not any("<its sft model>" in word for word in words)
            if words[1] in ("sft", "train"):
                assert f"seed={seed}" in words
                compose_config(words[1], words[2:])  # the header's arguments with the script's: a valid command
            assert words[1] == "sft" or "eval.num_tasks=7" in words
        train = next(words for words in mine if words[1] == "train")
        if kinds[0] == "sft":
            assert f"model.path={folder / 'sft' / 'model'}" in train
            assert next(words for words in mine if words[1] == "eval")[2] == str(folder / "sft" / "model")
        else:  # the start is the build, which the script makes: the dry run says which
            assert f"`agentrl train {shlex.join(train[2:-2])}` builds" in result.stdout


def test_an_unknown_recipe_and_one_without_a_start_are_one_line_each(cache_dir):
    unknown = reproduce(cache_dir, "gem_2049", "--dry-run")
    assert unknown.returncode == 1 and unknown.stderr.startswith("reproduce_recipe: no recipe 'gem_2049' in ")
    assert "gem_2048" in unknown.stderr and len(unknown.stderr.strip().splitlines()) == 1
    reference = reproduce(cache_dir, "grpo_alfworld_7b", "--dry-run")
    assert reference.returncode == 1 and "gives no commands of a start" in reference.stderr
    assert len(reference.stderr.strip().splitlines()) == 1


def test_bad_options_are_refused_before_anything_runs(cache_dir, tmp_path):
    twice = reproduce(cache_dir, "gem_2048", "--starts", "1", "1", "--out", str(tmp_path))
    assert twice.returncode == 1 and "names a start twice" in twice.stderr
    none = reproduce(cache_dir, "gem_2048", "--tasks", "0", "--out", str(tmp_path))
    assert none.returncode == 1 and "--tasks 0" in none.stderr and not list(tmp_path.iterdir())
    nothing = reproduce(cache_dir, "gem_2048", "--out", str(tmp_path), "--against", str(tmp_path / "no_such"))
    assert nothing.returncode == 1 and "no reproduce.json there" in nothing.stderr and not list(tmp_path.iterdir())


def test_against_pairs_each_start_end_with_the_same_start_of_another_reproduction(tmp_path):
    from scripts.reproduce_recipe import against_lines

    tasks = ["t0", "t1", "t2", "t3"]
    theirs = {"0": [0, 0, 1, 0], "1": [1, 1, 1, 1]}
    record = {"command": "control", "starts": {k: {"tasks": tasks, "end_outcomes": v} for k, v in theirs.items()}}
    (tmp_path / "reproduce.json").write_text(json.dumps(record))
    ours = [{"tasks": tasks, "end_outcomes": [1, 1, 1, 0]}, {"tasks": tasks, "end_outcomes": [1, 1, 1, 1]}]
    head, *rows = table_rows("\n".join(against_lines([0, 1], ours, tmp_path)))
    assert head == ["start", "end here", "end there", "difference", "95 % interval"]
    assert rows[0][:4] == ["0", "0.75", "0.25", "+0.50"] and rows[1][:4] == ["1", "1.00", "1.00", "+0.00"]
    assert rows[1][4] == "[+0.00, +0.00]" and rows[2][:4] == ["mean of 2", "", "", "**+0.25**"]
    with pytest.raises(SystemExit, match="it has no start 2"):
        against_lines([2], ours[:1], tmp_path)
    with pytest.raises(SystemExit, match="other held-out tasks"):
        against_lines([0], [{"tasks": ["u0"], "end_outcomes": [1]}], tmp_path)


def test_the_mean_end_resamples_the_starts_then_the_tasks():
    from scripts.reproduce_recipe import mean_end

    won, lost = {"end_outcomes": [1, 1, 1, 1]}, {"end_outcomes": [0, 0, 0, 0]}
    assert mean_end([won, won]) == (1.0, 1.0, 1.0)
    # two starts that differ: the mean is between them and the interval spans the starts' spread
    mean, low, high = mean_end([won, lost])
    assert (mean, low, high) == (0.5, 0.0, 1.0)
    mixed = mean_end([{"end_outcomes": [1, 0, 1, 0]}, {"end_outcomes": [1, 1, 0, 1]}])
    assert mixed[0] == 0.625 and 0.0 <= mixed[1] < 0.625 < mixed[2] <= 1.0


# Every phase in seconds: a build of 10 warm-up steps on 200 turns, a clone of 4 expert episodes, one RL iteration
QUICK = ["--tasks", "2", "--threads", "1", "--overrides", "model.tiny.demo_turns=200", "model.tiny.warmup_steps=10"]
QUICK_TRAIN = ["logger=none", "trainer.iterations=1", "trainer.tasks_per_iteration=1", "trainer.group_size=2"]
QUICK_TRAIN += ["trainer.eval_every=1"]


def table_rows(stdout: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in stdout.splitlines() if line[:2] == "| "]


def check_row(stdout: str, starts: list[int]) -> None:
    """The printed row: a header, a line a start, the mean, ten cells each; the machine, commit and threads."""
    head, *rows = table_rows(stdout)
    assert head[:7] == ["start", "build", "start held-out", "held-out through training", "end", "gain", "95 % interval"]
    assert [row[0] for row in rows] == [*map(str, starts), f"mean of {len(starts)}"]
    assert all(len(row) == len(head) == 10 for row in rows)
    for row in rows:
        assert re.fullmatch(r"\**[+-]\d\.\d\d\**", row[5]) and re.fullmatch(
            r"\**\[[+-]\d\.\d\d, [+-]\d\.\d\d\]\**", row[6]
        )
    assert all(re.fullmatch(r"[\d,]+ s", row[7]) and re.fullmatch(r"[\d,]+ s", row[9]) for row in rows[:-1])
    assert re.search(r"\d+-core .+; commit [0-9a-f]{40}(-dirty)?; torch threads a run: 1 \(OMP_NUM_THREADS\)", stdout)
    ended = re.search(r"The mean end: (\d\.\d{3}) \[(\d\.\d{3}), (\d\.\d{3})\]", stdout)
    assert ended and float(ended[2]) <= float(ended[1]) <= float(ended[3]), stdout
    assert float(ended[1]) == pytest.approx(float(rows[-1][4].strip("*")), abs=5e-4)  # the row's mean end


@pytest.mark.slow
@pytest.mark.gem
def test_a_recipe_with_a_clone_reproduces_end_to_end_each_start_from_its_own_build_and_clone(cache_dir, tmp_path):
    sft = ["--sft-overrides", "sft.episodes=4", "eval.num_tasks=2"]
    args = ["gem_2048", "--starts", "0", "1", "--out", str(tmp_path), *QUICK, *sft, "--train-overrides", *QUICK_TRAIN]
    result = reproduce(cache_dir, *args)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    check_row(result.stdout, [0, 1])
    clones = []
    for seed in (0, 1):
        folder = tmp_path / f"start_{seed}"
        for run in ("sft", "train"):  # the seed of the build (model.tiny.seed), of the clone and of RL
            cfg = OmegaConf.load(folder / run / "config.yaml")
            assert cfg.seed == seed and cfg.model.tiny.seed == seed, (run, seed)
        assert OmegaConf.load(folder / "train" / "config.yaml").model.path == str(folder / "sft" / "model")
        assert (folder / "eval_start" / "trajectories.jsonl").is_file() and (
            folder / "eval_end" / "eval.json"
        ).is_file()
        clones.append((folder / "sft" / "model" / "model.safetensors").read_bytes())
    assert clones[0] != clones[1], "each start clones its own build"
    again = reproduce(cache_dir, *args)  # every phase finished: nothing runs again, the same row is printed
    assert again.returncode == 0 and " ... (log " not in again.stdout
    assert table_rows(again.stdout) == table_rows(result.stdout)


@pytest.mark.slow
@pytest.mark.gem
def test_a_recipe_from_the_build_evaluates_each_starts_own_build_as_training_does(cache_dir, tmp_path):
    import json

    from agentrl import metrics_log

    args = ["gem_guessthenumber", "--starts", "0", "1", "--out", str(tmp_path), *QUICK, "--train-overrides"]
    result = reproduce(cache_dir, *args, *QUICK_TRAIN)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    check_row(result.stdout, [0, 1])
    builds = [json.loads((tmp_path / f"start_{seed}" / "phases.json").read_text())["build_folder"] for seed in (0, 1)]
    assert builds[0] != builds[1], "each start builds its own tiny model"
    for seed in (0, 1):
        folder = tmp_path / f"start_{seed}"
        assert OmegaConf.load(folder / "train" / "config.yaml").model.tiny.seed == seed
        records = metrics_log.read_records(folder / "train")
        first, last = (next(r["eval/success"] for r in rs if "eval/success" in r) for rs in (records, records[::-1]))
        start, end = (json.loads((folder / f"eval_{x}" / "eval.json").read_text())["metrics"] for x in ("start", "end"))
        assert start["eval/success"] == first and end["eval/success"] == last  # training's own evaluations
