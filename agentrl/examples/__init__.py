"""Tool-calling environments that ship with agentrl, in TRL's environment_factory shape (docs/environments.md,
"Tool-calling agents"): `calculator` (reasoning-gym's arithmetic, one tool, an expert) and `game_2048` (a
multi-turn board game with a `move` tool)."""
