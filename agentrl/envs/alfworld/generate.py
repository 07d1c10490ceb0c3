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

This module draws one game (receptacles, placements, the PDDL problem), checks it and writes it (in worker
processes for a pool); playing a game is `engine`'s job, the floor plans and placement rules `floorplans`'.

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
from dataclasses import dataclass
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
from agentrl.envs.alfworld.engine import _engine, solve
from agentrl.envs.alfworld.floorplans import (
    _LAMP_HOSTS,
    _TOOLS,
    _combos,
    _coords,
    _floorplan,
    _loc,
    _Recep,
    _rules,
    _scenes,
)
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

MIN_RECEPTACLES = 6
MAX_RECEPTACLES = 15
# An attempt is one draw; most draws are accepted, so this bound only stops a broken setup.
MAX_ATTEMPTS = 400

# Receptacle types the domain names as constants, declared in every problem.
_DOMAIN_RTYPES = ("SinkBasin", "Microwave", "Fridge")
_DOMAIN_OTYPES = ("Knife", "ButterKnife")

_MANGLE = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


# --------------------------------------------------------------------------- one game


@dataclass
class _Draft:
    task_type: str
    scene: int
    obj: str
    recep: str
    toggle: str
    receptacles: list[_Recep]
    placements: list[tuple[str, str, _Recep]]  # (object id, object type, receptacle)
    start: str  # agent's start location


def _draw(task_type: str, folder: str, rng: random.Random) -> _Draft:
    rules = _rules()
    scene = rng.choice(_scenes(folder, task_type))
    fp = _floorplan(scene)
    combos = _combos(task_type, fp)
    obj = rng.choice(sorted({c[0] for c in combos}))
    _, recep, toggle = rng.choice([c for c in combos if c[0] == obj])
    by_type: dict[str, list[_Recep]] = {}
    for r in fp.receptacles:
        by_type.setdefault(r.rtype, []).append(r)

    # Receptacles: the ones the task needs, then random others up to 6..15.
    required: list[_Recep] = []
    if recep:
        required.append(rng.choice(by_type[recep]))
    if task_type in _TOOLS:
        required.append(rng.choice(by_type[_TOOLS[task_type][1]]))
    if toggle:
        host = rng.choice([r for h in _LAMP_HOSTS for r in by_type.get(h, [])])
        required.append(host)
    start_options = [r for r in fp.receptacles if obj in rules.can_hold[r.rtype] and r.rtype != recep]
    first_home = rng.choice(start_options)
    required.append(first_home)
    chosen = list(dict.fromkeys(required))
    others = [r for r in fp.receptacles if r not in chosen]
    rng.shuffle(others)
    size = rng.randint(MIN_RECEPTACLES, MAX_RECEPTACLES)
    chosen += others[: max(0, size - len(chosen))]
    chosen.sort(key=lambda r: r.rid)

    placements: list[tuple[str, str, _Recep]] = []
    taken: set[str] = set()

    def place(otype: str, where: _Recep) -> None:
        x, y, z = _coords(where.rid)
        while True:
            oid = (
                f"{otype}|{x + rng.uniform(-0.4, 0.4):+06.2f}|{y + rng.uniform(0.0, 0.2):+06.2f}"
                f"|{z + rng.uniform(-0.4, 0.4):+06.2f}"
            )
            if oid not in taken:
                taken.add(oid)
                placements.append((oid, otype, where))
                return

    # The task's objects: never in a receptacle of the goal's type, so the goal does not hold yet.
    homes = [r for r in chosen if obj in rules.can_hold[r.rtype] and r.rtype != recep]
    count = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    place(obj, first_home)
    for _ in range(count - 1):
        place(obj, rng.choice(homes))
    if toggle:
        place(toggle, host)
    # Distractors: other types of this floor plan, wherever they fit.
    pool = [t for t in fp.object_types if t != obj]
    for otype in rng.sample(pool, min(len(pool), rng.randint(3, 8))):
        fits = [r for r in chosen if otype in rules.can_hold[r.rtype]]
        for _ in range(rng.randint(1, 2) if fits else 0):
            place(otype, rng.choice(fits))

    used = {r.loc for r in fp.receptacles}
    x0, x1, z0, z1 = fp.bounds
    while True:
        start = _loc(rng.uniform(x0, x1), rng.uniform(z0, z1), rng.choice((0, 90, 180, 270)), 30)
        if start not in used:
            break
    return _Draft(task_type, scene, obj, recep, toggle, chosen, placements, start)


def _mangle(name: str) -> str:
    return "".join(_MANGLE.get(ch, ch) for ch in name)


def _problem(draft: _Draft, name: str) -> str:
    """The PDDL problem, in the shape of ALFWorld's own `initial_state.pddl`."""
    rules, glib = _rules(), _engine().goal_library
    objects = [(_mangle(oid), otype, _mangle(r.rid), _mangle(r.loc)) for oid, otype, r in draft.placements]
    receps = [(_mangle(r.rid), r.rtype, _mangle(r.loc)) for r in draft.receptacles]
    otypes = sorted({o[1] for o in objects} | set(_DOMAIN_OTYPES))
    rtypes = sorted({r[1] for r in receps} | set(_DOMAIN_RTYPES))
    present_o = sorted({o[1] for o in objects})
    start = _mangle(draft.start)

    decl = ["agent1 - agent"]
    decl += [f"{t}Type - otype" for t in otypes]
    decl += [f"{t}Type - rtype" for t in rtypes]
    decl += [f"{o[0]} - object" for o in sorted(objects)]
    decl += [f"{r[0]} - receptacle" for r in sorted(receps)]
    decl += [f"{loc} - location" for loc in sorted({r[2] for r in receps} | {start})]

    init = [f"(receptacleType {rid} {rtype}Type)" for rid, rtype, _ in receps]
    init += [f"(objectType {oid} {otype}Type)" for oid, otype, _, _ in objects]
    init += [
        f"(canContain {rt}Type {ot}Type)"
        for rt in sorted({r[1] for r in receps})
        for ot in present_o
        if ot in rules.can_hold[rt]
    ]
    init += [f"(pickupable {oid})" for oid, otype, _, _ in objects if otype in rules.pickupable]
    init += [f"(isReceptacleObject {oid})" for oid, otype, _, _ in objects if otype in rules.movable]
    init += [f"(openable {rid})" for rid, rtype, _ in receps if rtype in rules.openable]
    init.append(f"(atLocation agent1 {start})")
    for flag, action in (
        ("cleanable", "Cleanable"),
        ("heatable", "Heatable"),
        ("coolable", "Coolable"),
        ("toggleable", "Toggleable"),
        ("sliceable", "Sliceable"),
    ):
        init += [f"({flag} {oid})" for oid, otype, _, _ in objects if otype in rules.actions[action]]
    init += [f"(inReceptacle {oid} {rid})" for oid, _, rid, _ in objects]
    init += [f"(receptacleAtLocation {rid} {loc})" for rid, _, loc in receps]
    init += [f"(objectAtLocation {oid} {loc})" for oid, _, _, loc in objects]

    goal = (
        glib.gdict[draft.task_type]["pddl"]
        .replace("#", "-")
        .format(obj=draft.obj, recep=draft.recep, toggle=draft.toggle, mrecep="")
    )
    indent = "\n        "
    return (
        f"\n(define (problem {name})\n(:domain alfred)\n(:objects\n        {indent.join(decl)}\n        )\n\n"
        f"(:init\n        {indent.join(init)}\n        )\n\n{goal}"
    )


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
