"""Solvable synthetic ALFWorld games, made offline from what the `alfworld` wheel ships.

The wheel has no games (`alfworld-download` fetches them from GitHub), but it has
everything a game is made of:

- the PDDL domain `alfworld/data/alfred.pddl` and the grammar `alfworld/data/alfred.twl2`;
- the goal templates of `alfworld.gen.goal_library` (PDDL goal and English task text);
- the object and receptacle rules of `alfworld.gen.constants` (what fits where, what can be
  cleaned, heated, cooled, toggled, which receptacles open);
- the receptacle lists and object types of the 120 ALFRED floor plans (`alfworld/gen/layouts`).

A game here is a floor plan's receptacles (a random 6 to 15 of them, always including
the ones the task needs), the task's objects plus some distractors placed where the rules
allow, and the goal from the goal library. Scenes are synthetic: the placements are
drawn here, not taken from ALFRED trajectories. Every game is checked before it is
written: TextWorld loads it with ALFWorld's own wrappers, the agent follows the
planner's `policy_commands` step by step, and the game must end `won`; failures are
redrawn. The planner's plan is stored as the game's `walkthrough`.

Drawing one game (receptacles, placements, the PDDL problem) is `draw`'s job; this module makes the draw into
the game's files, checks it and writes it (in worker processes for a pool); playing a game is `engine`'s job,
the floor plans and placement rules `floorplans`'.

Games go into the download's layout, so `find_games` and ALFWorld's own loader read both:
`<out_dir>/json_2.1.1/<split>/<task>-<Obj>-None-<Recep>-<scene>/trial_<split>_s<seed>_<index>/`.

Splits follow ALFRED: `train` and `valid_seen` draw from the training floor plans,
`valid_unseen` from the held-out ones (`constants.TEST_SCENE_NUMBERS`). Train and
valid_seen share floor plans, so a layout's signature (`game_signature`) decides which of
the two may use it: no layout can be drawn in both.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from agentrl.envs.alfworld.data import (
    DATA_DIRNAME,
    GAME_FILENAME,
    SHORT_TYPES,
    SPLITS,
    TASK_TYPES,
    TRAJ_FILENAME,
    split_folder,
)
from agentrl.envs.alfworld.draw import _draw, _problem
from agentrl.envs.alfworld.engine import _engine, solve
from agentrl.envs.alfworld.signatures import game_signature, problem_signature, split_accepts
from agentrl.progress import Phase

__all__ = [
    "TASK_TYPES",
    "game_signature",
    "generate_games",
    "problem_signature",
    "generate_split_pool",
    "generation_workers",
]

# An attempt is one draw; most draws are accepted, so this bound only stops a broken setup.
MAX_ATTEMPTS = 400


def _rng(seed: int, folder: str, task_type: str, index: int, attempt: int) -> random.Random:
    key = f"agentrl-alfworld|{seed}|{folder}|{task_type}|{index}|{attempt}".encode()
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


def _build(seed: int, folder: str, task_type: str, index: int, attempt: int) -> tuple[str, dict, dict] | None:
    """One draw: (relative game folder, game json without walkthrough, traj_data), or None
    when the draw's layout belongs to another split."""
    eng = _engine()
    rng = _rng(seed, folder, task_type, index, attempt)
    draft = _draw(task_type, folder, rng)
    trial = f"trial_{folder}_s{seed}_{index:05d}"
    problem = _problem(draft, f"plan_{trial}")
    if not split_accepts(folder, problem_signature(task_type, draft.scene, problem)):
        return None
    target = draft.recep or draft.toggle
    rel = f"{task_type}-{draft.obj}-None-{target}-{draft.scene}/{trial}"
    template = rng.choice(eng.goal_library.gdict[task_type]["templates"])
    task_desc = template.format(
        obj=draft.obj.lower(), recep=draft.recep.lower(), toggle=draft.toggle.lower(), mrecep=""
    )
    traj = {
        "task_id": trial,
        "task_type": task_type,
        "pddl_params": {
            "object_target": draft.obj,
            "parent_target": draft.recep,
            "toggle_target": draft.toggle,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"scene_num": draft.scene, "floor_plan": f"FloorPlan{draft.scene}"},
        "turk_annotations": {"anns": [{"task_desc": task_desc}]},
        "agentrl": {
            "synthetic": True,
            "generator": __name__,
            "seed": seed,
            "split": folder,
            "index": index,
            "attempt": attempt,
        },
    }
    # ALFWorld's own helper puts the goal text into the grammar; with probability 1 it takes
    # the annotation, which holds the goal-library template drawn above.
    grammar = eng.add_task_to_grammar(eng.grammar, traj, goal_desc_human_anns_prob=1.0, rng=rng)
    game = {"pddl_domain": eng.domain, "grammar": grammar, "pddl_problem": problem, "solvable": True}
    return rel, game, traj


def _existing(game_path: Path, game: dict) -> bool:
    """Whether an earlier run already wrote and verified this very game."""
    try:
        old = json.loads(game_path.read_text())
        return (
            (game_path.parent / TRAJ_FILENAME).is_file()
            and old.get("solvable") is True
            and bool(old.get("walkthrough"))
            and old.get("pddl_problem") == game["pddl_problem"]
            and old.get("grammar") == game["grammar"]
            and old.get("pddl_domain") == game["pddl_domain"]
        )
    except (OSError, ValueError, AttributeError):
        return False


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _generate_one(split_dir: Path, seed: int, folder: str, task_type: str, index: int, scratch: Path) -> Path:
    for attempt in range(MAX_ATTEMPTS):
        built = _build(seed, folder, task_type, index, attempt)
        if built is None:
            continue
        rel, game, traj = built
        final = split_dir / rel / GAME_FILENAME
        if _existing(final, game):
            return final  # written and verified by an earlier run with the same seed
        probe_dir = scratch / rel
        probe_dir.mkdir(parents=True, exist_ok=True)
        probe = probe_dir / GAME_FILENAME
        probe.write_text(json.dumps(game))
        (probe_dir / TRAJ_FILENAME).write_text(json.dumps(traj))
        walkthrough = solve(probe)
        shutil.rmtree(probe_dir, ignore_errors=True)
        if walkthrough is None:
            continue
        game["walkthrough"] = walkthrough
        final.parent.mkdir(parents=True, exist_ok=True)
        _write_json(final.parent / TRAJ_FILENAME, traj)
        _write_json(final, game)  # last: a folder with a game file is complete
        return final
    raise RuntimeError(
        f"no solvable {task_type} game after {MAX_ATTEMPTS} draws (seed={seed}, split={folder}, "
        f"index={index}): the alfworld install looks broken"
    )


def generation_workers() -> int:
    """Processes for game generation: one per core, at most 8 (each game is a planner search)."""
    return max(1, min(os.cpu_count() or 1, 8))


def generate_games(
    out_dir: str | os.PathLike,
    per_type: int,
    seed: int,
    split: str = "train",
    progress: bool = False,
    workers: int = 1,
) -> list[Path]:
    """Write `per_type` planner-verified games of each of the six task types; return their paths.

    Games land in `out_dir/json_2.1.1/<split folder>/...`, the layout of the real download,
    so `find_games(out_dir, split)` lists them. `split` is an agentrl split name
    (train, eval_in_distribution, eval_out_of_distribution) or a folder name (train,
    valid_seen, valid_unseen). Game `i` of a type depends only on (seed, split, type, i):
    a larger `per_type` adds games and keeps the earlier ones, and games already on disk
    are kept, not re-verified. Paths come back type by type, index by index.

    With `workers` > 1 the games are made in that many processes: the same pool, since each game depends on its
    own (seed, split, type, index) only."""
    return generate_split_pool(out_dir, per_type, seed, splits=(split,), progress=progress, workers=workers)[split]


def generate_split_pool(
    out_dir: str | os.PathLike,
    per_type: int,
    seed: int,
    *,
    eval_per_type: int | None = None,
    progress: bool = False,
    workers: int = 1,
    splits: tuple[str, ...] = SPLITS,
) -> dict[str, list[Path]]:
    """All three splits under one root: `per_type` train games of each task type, `eval_per_type` (default:
    `per_type`) for valid_seen and valid_unseen, by `workers` processes; {split: paths} (see `generate_games`)."""
    if per_type < 0 or (eval_per_type is not None and eval_per_type < 0):
        raise ValueError(f"per_type must be >= 0, got {per_type}")
    eval_n = per_type if eval_per_type is None else eval_per_type
    jobs = [
        (split, task_type, index)
        for split in splits
        for task_type in TASK_TYPES
        for index in range(per_type if split_folder(split) == "train" else eval_n)
    ]
    root = Path(out_dir).expanduser() / DATA_DIRNAME
    paths: dict[str, list[Path]] = {split: [] for split in splits}
    with tempfile.TemporaryDirectory(prefix="agentrl-alfworld-gen-") as scratch, ExitStack() as stack:
        phase = stack.enter_context(Phase("ALFWorld: generating games", len(jobs))) if progress else None
        calls = [
            (root / split_folder(split), seed, split_folder(split), task_type, index, Path(scratch) / f"{n}")
            for n, (split, task_type, index) in enumerate(jobs)
        ]
        if workers > 1 and len(jobs) > 1:
            # spawn, as the environment workers do: the training process may hold torch's threads
            executor = stack.enter_context(
                ProcessPoolExecutor(min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn"))
            )
            made = executor.map(_generate_one, *zip(*calls))
        else:
            made = (_generate_one(*call) for call in calls)
        for (split, task_type, index), path in zip(jobs, made):
            paths[split].append(path)
            if phase is not None:
                phase.advance(note=f"{split_folder(split)}: {SHORT_TYPES[task_type]} #{index}")
    return paths
