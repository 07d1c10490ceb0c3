"""`agentrl envs`'s table of GEM's ids: every id GEM registers, whether it runs here, and why not."""

from __future__ import annotations


def gem_ids_table():
    """GEM's ids (env=gem env.id=...) and whether each runs here, where gem-llm is installed; reasoning-gym's
    tasks in one row."""
    from rich.table import Table

    from agentrl.envs.gem_games import id_status, registered_ids

    ids = registered_ids()
    if not ids:
        return None
    table = Table(title="env=gem env.id=...")
    table.add_column("env.id=")
    table.add_column("usable here")
    families: dict[str, list[str]] = {}
    for env_id in ids:
        if env_id.startswith("game:"):
            table.add_row(env_id, _shown(id_status(env_id)))
        else:  # the data-set families and reasoning-gym's tasks: one row a family
            families.setdefault(env_id.split(":", 1)[0], []).append(env_id)
    for family, members in families.items():
        names = ", ".join(m.split(":", 1)[1] for m in members[:4])
        table.add_row(f"{family}:<name> ({len(members)}: {names}, ...)", _shown(id_status(members[0])))
    return table


def _shown(status: str) -> str:
    """A status as the table shows it: red where the id cannot run here."""
    from rich.markup import escape

    return escape(status) if status.startswith("yes") else f"[red]{escape(status)}[/]"
