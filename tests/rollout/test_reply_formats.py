"""Reply formats (rollout/parsing.py): the env's own format in the prompt, the parser, and what the env receives."""

from __future__ import annotations

import pytest

from agentrl.rollout.parsing import action_for_env, format_reply, parse_action, parse_reply
from agentrl.rollout.prompts import build_prompt

PROMPT = dict(task="t", observation="o", admissible=["up", "down"], history=[("o0", "up")], step=1, history_length=2)


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("\\boxed{up}", "up"),
        ("I push it: \\boxed{ 5 4 } then", "5 4"),
        ("\\boxed{[6 7 S]}", "[6 7 S]"),  # case kept: a crossword's letters
        ("<think>go</think> \\boxed{a{b}c}", "a{b}c"),  # braces inside, balanced
        ("\\boxed{left} no, \\boxed{right}", "right"),  # the last one, as GEM's games read it
    ],
)
def test_a_boxed_reply_parses_and_reaches_the_env_boxed(reply, action):
    parsed = parse_reply(reply, "boxed")
    assert parsed.valid and parsed.action == action
    assert action_for_env(reply, parsed, "boxed") == f"\\boxed{{{action}}}"


@pytest.mark.parametrize("reply", ["\\boxed{", "\\boxed{}", "up", "<think>\\boxed{up}</think>", "\\boxed{<a>}", None])
def test_a_malformed_boxed_reply_is_invalid_and_never_raises(reply):
    assert not parse_reply(reply, "boxed").valid


def test_the_default_format_is_agentrls_tags_unchanged():
    reply = "<think>x</think><action>Go To Fridge 1</action>"
    assert parse_reply(reply) == parse_action(reply)
    assert action_for_env(reply, parse_reply(reply)) == "go to fridge 1"
    assert format_reply("up") == "<action>up</action>" and format_reply("up", "boxed") == "\\boxed{up}"


@pytest.mark.parametrize("template", ["alfworld", "scienceworld", "compact", "generic"])
def test_every_template_asks_for_the_format_and_only_its_instruction_changes(template):
    tags = build_prompt(template, **PROMPT)
    boxed = build_prompt(template, **PROMPT, reply_format="boxed")
    assert build_prompt(template, **PROMPT, reply_format="action") == tags
    assert "<action>" in tags.splitlines()[-1] and "<action>" not in boxed.splitlines()[-1]
    assert "\\boxed{" in boxed.splitlines()[-1]
    assert tags.splitlines()[:-1] == boxed.splitlines()[:-1]


def test_an_observation_quoting_the_instruction_is_left_alone():
    quoted = dict(PROMPT, observation="a sign reads: Reply <action>...</action>")
    assert "a sign reads: Reply <action>...</action>" in build_prompt("compact", **quoted, reply_format="boxed")
