"""`agentrl envs`'s tables of GEM's ids: every id GEM registers, whether it runs here, and why not."""

from __future__ import annotations

from agentrl.errors import UserError


def gem_ids_table():
    """GEM's ids (env=gem env.id=...) and whether each runs here, where gem-llm is installed: every game, and the
    other families (reasoning-gym's tasks, the data sets) one row each."""
    from rich.table import Table

    by_family = _families()
    if not by_family:
        return None
    table = Table(title="env=gem env.id=...")
    table.add_column("env.id=")
    table.add_column("usable here")
    for env_id in by_family.pop("game", []):
        table.add_row(env_id, _status(env_id))
    for family, members in by_family.items():  # the data-set families and reasoning-gym's tasks: one row a family
        names = ", ".join(m.split(":", 1)[1] for m in members[:4])
        table.add_row(
            f"{family}:<name> ({len(members)}: {names}, ...; agentrl envs --gem {family})", _status(members[0])
        )
    return table


def gem_family_table(family: str):
    """`agentrl envs --gem FAMILY`: every GEM id of one family ("rg", "math", ...) and whether it runs here."""
    from rich.table import Table

    by_family = _families()
    if not by_family:
        raise UserError("agentrl envs --gem: gem-llm is not installed: pip install -e '.[gem]'")
    members = by_family.get(family.rstrip(":"))
    if members is None:
        raise UserError(
            f"agentrl envs --gem {family}: not a GEM family; GEM's families: {', '.join(sorted(by_family))}"
        )
    table = Table(title=f"env=gem env.id=... ({len(members)} ids)")
    table.add_column("env.id=")
    table.add_column("usable here")
    for env_id in members:
        table.add_row(env_id, _status(env_id))
    return table


def _families() -> dict[str, list[str]]:
    """GEM's registered ids by family (the part before the colon), in GEM's order; empty without gem-llm."""
    from agentrl.envs.gem_games import registered_ids

    by_family: dict[str, list[str]] = {}
    for env_id in registered_ids():
        by_family.setdefault(env_id.split(":", 1)[0], []).append(env_id)
    return by_family


def _status(env_id: str) -> str:
    """Whether an id runs here, as the tables show it."""
    from agentrl.envs.gem_games import id_status

    return _shown(id_status(env_id))


def _shown(status: str) -> str:
    """A status as the table shows it: red where the id cannot run here."""
    from rich.markup import escape

    return escape(status) if status.startswith("yes") else f"[red]{escape(status)}[/]"
