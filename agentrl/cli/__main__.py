"""`python -m agentrl.cli ...`: the same app as the `agentrl` console script (scripts, tests and ranks started
through `accelerate launch` call it this way)."""

from agentrl.cli.app import app

app()
