"""One synthetic ALFWorld game drawn: which receptacles, which objects where, where the agent starts, and the
PDDL problem that says so.

A draw takes a floor plan the task can use (`floorplans`), the receptacles the task needs plus random others
(`MIN_RECEPTACLES` to `MAX_RECEPTACLES` in all), the task's objects away from the goal's receptacle type,
distractors wherever the placement rules allow, and a start location off every receptacle; `_problem` writes it
as a PDDL problem in the shape of ALFWorld's own `initial_state.pddl`, with the goal from the goal library.
Everything comes from the `random.Random` passed in, so a draw is reproducible; checking it with the planner and
writing the game's files is `generate`'s job.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentrl.envs.alfworld.engine import _engine
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

MIN_RECEPTACLES = 6
MAX_RECEPTACLES = 15

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
