"""Builds the household suites from their config nodes (see conf/env/household.yaml, household_team.yaml)."""

from __future__ import annotations

from typing import Any

from agentrl.errors import UserError


def build(env_cfg: Any):
    from agentrl.envs.household import HouseholdSuite

    try:
        return HouseholdSuite(level=env_cfg.level, max_steps=env_cfg.max_steps)
    except ValueError as err:
        raise UserError(f"env.level: {err}") from None


def build_team(env_cfg: Any):
    from agentrl.envs.household_team import HouseholdTeamSuite

    try:
        return HouseholdTeamSuite(level=env_cfg.level, max_steps=env_cfg.max_steps)
    except ValueError as err:
        raise UserError(f"env.level: {err}") from None
