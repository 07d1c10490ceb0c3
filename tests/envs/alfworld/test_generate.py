"""Synthetic ALFWorld games: all six types load and are won by the planner, the download's
layout, disjoint splits, determinism, and sys.argv left alone by the engine."""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("alfworld_engine")  # skips without the extra

from agentrl.envs.alfworld.data import (  # noqa: E402
    SHORT_TYPES,
    SPLITS,
    TASK_TYPES,
    find_games,
    preserve_argv,
    task_type_of,
)
from agentrl.envs.alfworld.draw import MAX_RECEPTACLES, MIN_RECEPTACLES  # noqa: E402
from agentrl.envs.alfworld.engine import make_textworld_env, planner_walkthrough, play  # noqa: E402
from agentrl.envs.alfworld.generate import (  # noqa: E402
    _build,
    game_signature,
    generate_games,
    problem_signature,
)

SEED = 7
TASK_DIR = re.compile(
    r"^(?P<task>[a-z_]+)-(?P<obj>[A-Za-z]+)-(?P<mrecep>None|[A-Za-z]+)-(?P<recep>[A-Za-z]+)"
    r"-(?P<scene>\d+)$"
)


@pytest.fixture(scope="session")
def pool(tmp_path_factory) -> tuple[Path, dict[str, list[Path]]]:
    """One game of each type in each split. test_data.py uses the same folder and seed, so
    whichever module runs second finds the games written and verified already."""
    root = tmp_path_factory.getbasetemp() / "alfworld-generated"
    return root, {split: generate_games(root, per_type=1, seed=SEED, split=split) for split in SPLITS}


def _traj(game: Path) -> dict:
    return json.loads((game.parent / "traj_data.json").read_text())


def test_all_six_types_load_and_the_planner_wins(pool):
    _, games = pool
    train = games["train"]
    assert [_traj(g)["task_type"] for g in train] == list(TASK_TYPES)
    for game in train:
        plan = planner_walkthrough(game)
        assert plan, game
        assert play(game, plan) == (True, len(plan))
        stored = json.loads(game.read_text())["walkthrough"]
        if stored != plan:  # the stored walkthrough was planned step by step
            assert play(game, stored) == (True, len(stored))
    assert play(train[0], ["look", "inventory"]) == (False, 2)  # the goal does not hold at the start


def test_layout_and_files_match_the_download(pool):
    root, games = pool
    wheel_domain = (Path(sys.modules["alfworld"].__file__).parent / "data" / "alfred.pddl").read_text()
    from alfworld.gen.constants import TEST_SCENE_NUMBERS, TRAIN_SCENE_NUMBERS

    for split, folder in SPLITS.items():
        assert len(games[split]) == len(TASK_TYPES)
        for game in games[split]:
            rel = game.relative_to(root).parts
            assert rel[:2] == ("json_2.1.1", folder) and rel[-1] == "game.tw-pddl" and len(rel) == 5
            assert rel[3].startswith("trial_")
            m = TASK_DIR.match(rel[2])
            assert m, rel[2]
            traj = _traj(game)
            params = traj["pddl_params"]
            assert set(params) >= {"object_target", "parent_target", "toggle_target", "mrecep_target", "object_sliced"}
            assert m["task"] == traj["task_type"] and task_type_of(game) == SHORT_TYPES[traj["task_type"]]
            assert m["obj"] == params["object_target"] and m["mrecep"] == "None"
            assert m["recep"] == (params["parent_target"] or params["toggle_target"])
            assert int(m["scene"]) == traj["scene"]["scene_num"]
            assert int(m["scene"]) in (TEST_SCENE_NUMBERS if folder == "valid_unseen" else TRAIN_SCENE_NUMBERS)
            desc = traj["turk_annotations"]["anns"][0]["task_desc"]
            assert desc and desc == desc.lower()

            data = json.loads(game.read_text())
            assert data["solvable"] is True and data["walkthrough"]
            assert data["pddl_domain"] == wheel_domain
            assert f"Your task is to: {desc}." in data["grammar"] and "UNKNOWN GOAL" not in data["grammar"]
            problem = data["pddl_problem"]
            n_receptacles = len(re.findall(r" - receptacle\n", problem[: problem.index("(:init")]))
            assert MIN_RECEPTACLES <= n_receptacles <= MAX_RECEPTACLES
            assert problem.rstrip().endswith(")") and "(:goal" in problem and "#" not in problem
    # find_games sees exactly what was written
    for split in SPLITS:
        assert find_games(root, split) == sorted(games[split])


def test_splits_are_disjoint(pool):
    root, games = pool
    signatures = {split: {game_signature(g) for g in games[split]} for split in SPLITS}
    folders = {
        split: {g.parent.relative_to(root / "json_2.1.1" / SPLITS[split]) for g in games[split]} for split in SPLITS
    }
    names = list(SPLITS)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not signatures[a] & signatures[b], (a, b)
            assert not folders[a] & folders[b], (a, b)
    # Train and valid_seen share floor plans: many draws (no planner needed) never meet.
    drawn: dict[str, set[str]] = {"train": set(), "valid_seen": set()}
    for folder in drawn:
        for task_type in TASK_TYPES:
            for index in range(40):
                built = _build(SEED, folder, task_type, index, 0)
                if built is not None:
                    rel, game, traj = built
                    drawn[folder].add(problem_signature(task_type, traj["scene"]["scene_num"], game["pddl_problem"]))
    assert len(drawn["train"]) > 100 and len(drawn["valid_seen"]) > 20
    assert not drawn["train"] & drawn["valid_seen"]


def test_generation_is_deterministic(pool, tmp_path):
    root, games = pool
    again = generate_games(tmp_path, per_type=1, seed=SEED, split="train")
    assert [p.relative_to(tmp_path) for p in again] == [p.relative_to(root) for p in games["train"]]
    for new, old in zip(again, games["train"]):
        assert new.read_bytes() == old.read_bytes()
        assert (new.parent / "traj_data.json").read_bytes() == (old.parent / "traj_data.json").read_bytes()
    # another seed gives other games
    other = [_build(SEED + 1, "train", t, 0, a) for t in TASK_TYPES for a in range(3)]
    other_signatures = {
        problem_signature(b[2]["task_type"], b[2]["scene"]["scene_num"], b[1]["pddl_problem"])
        for b in other
        if b is not None
    }
    assert other_signatures and other_signatures.isdisjoint(game_signature(g) for g in games["train"])


def test_rerun_keeps_games_on_disk(pool):
    root, games = pool
    stamps = [g.stat().st_mtime_ns for g in games["train"]]
    assert generate_games(root, per_type=1, seed=SEED, split="train") == games["train"]
    assert [g.stat().st_mtime_ns for g in games["train"]] == stamps
    # agentrl split names and folder names are the same split
    assert generate_games(root, per_type=1, seed=SEED, split="valid_seen") == games["eval_in_distribution"]
    assert generate_games(root, per_type=0, seed=SEED, split="valid_seen") == []


def test_sys_argv_survives_load_reset_and_step(pool):
    _, games = pool
    game = games["train"][0]
    before, before_obj = list(sys.argv), sys.argv
    with preserve_argv():
        env = make_textworld_env([game])
        obs, infos = env.reset()
        env.step(["look"])
        env.reset()
        env.close()
    assert sys.argv == before and sys.argv is before_obj
    assert "Your task is to:" in obs[0] and infos["admissible_commands"][0]
    planner_walkthrough(game)
    play(game, ["look"])
    assert sys.argv == before and sys.argv is before_obj


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown ALFWorld split"):
        generate_games(Path(tempfile.gettempdir()), 1, 0, split="test")
    with pytest.raises(ValueError, match="per_type"):
        generate_games(Path(tempfile.gettempdir()), -1, 0)


def test_generating_in_worker_processes_makes_the_same_games(tmp_path):
    """Each game depends only on (seed, split, type, index), so several processes write the same pool."""
    serial = generate_games(tmp_path / "serial", 1, SEED, "valid_seen")
    parallel = generate_games(tmp_path / "parallel", 1, SEED, "valid_seen", workers=2)
    assert [p.relative_to(tmp_path / "serial") for p in serial] == [
        p.relative_to(tmp_path / "parallel") for p in parallel
    ]
    for a, b in zip(serial, parallel):
        assert json.loads(a.read_text()) == json.loads(b.read_text())
