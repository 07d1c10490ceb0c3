"""Turn a model reply into an environment action.

The reply format is ``<think>...</think><action>...</action>``, with the think
block optional. This follows verl-agent's ALFWorld projection
(``agent_system/environments/env_package/alfworld/projection.py``): tags are
matched case-insensitively, the action is the stripped, lowercased text between
``<action>`` and ``</action>``, and a reply that does not have that shape is an
invalid action (it costs the invalid penalty, see docs/algorithms.md).

Deviations from the reference, on purpose:

- The reference takes the first ``<action>`` and the first ``</action>`` and
  ignores any others; here a reply must contain exactly one of each, in order.
  Two action blocks or nested tags are ambiguous, so they are invalid.
- The reference requires a ``<think>`` block; here it is optional (tiny models
  use a template without one), but if ``<think>`` appears it must be closed once,
  before ``<action>``. A lone ``</think>`` (a think opened by the chat template)
  is therefore invalid.
- The reference marks replies containing Chinese characters invalid. That is a
  property of one model family, not of the format, and is not done here.
- The reference sends a tail slice of an invalid reply to the environment; here
  ``env_action`` sends the whole reply, stripped and truncated to 200 characters.

Parsing uses ``str.find``/``str.count`` only, so it is linear in the reply length
and never raises.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"

# Length of the raw reply forwarded to the environment when no action parses.
MAX_RAW_ACTION_CHARS = 200

# Lowercase ASCII only: str.lower() can change the length of non-ASCII text
# ("İ" becomes two characters), which would shift the tag offsets.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True)
class ParsedAction:
    """The outcome of parsing one reply.

    ``action`` is the lowercased command when ``valid``, else None. ``think`` is
    the stripped reasoning when the reply has a well-formed think block (also for
    an invalid action), else None.
    """

    action: str | None
    valid: bool
    think: str | None


_INVALID = ParsedAction(action=None, valid=False, think=None)


def _think_block(reply: str, folded: str) -> tuple[bool, str | None, int]:
    """Check the optional think block: (ok, think text, offset where it ends)."""
    n_open, n_close = folded.count(THINK_OPEN), folded.count(THINK_CLOSE)
    if n_open == 0 and n_close == 0:
        return True, None, 0
    if n_open != 1 or n_close != 1:
        return False, None, 0
    start, end = folded.find(THINK_OPEN), folded.find(THINK_CLOSE)
    if end < start:
        return False, None, 0
    return True, reply[start + len(THINK_OPEN) : end].strip(), end + len(THINK_CLOSE)


def parse_action(reply: str) -> ParsedAction:
    """Parse ``<think>...</think><action>...</action>`` out of one model reply.

    Valid only if the reply holds exactly one ``<action>`` and one ``</action>``,
    in that order, around non-empty text without ``<``; and, if ``<think>``
    appears, exactly one closed think block that ends before ``<action>``. Text
    outside the blocks is ignored. Never raises: anything that is not a str is
    invalid.
    """
    if not isinstance(reply, str):
        return _INVALID
    folded = reply.translate(_ASCII_LOWER)

    think_ok, think, think_end = _think_block(reply, folded)
    if not think_ok:
        return _INVALID

    if folded.count(ACTION_OPEN) != 1 or folded.count(ACTION_CLOSE) != 1:
        return ParsedAction(None, False, think)
    start, end = folded.find(ACTION_OPEN), folded.find(ACTION_CLOSE)
    # The action must follow the think block, not sit inside it or before it.
    if end < start or start < think_end:
        return ParsedAction(None, False, think)

    action = reply[start + len(ACTION_OPEN) : end].strip().lower()
    if not action or "<" in action:
        return ParsedAction(None, False, think)
    return ParsedAction(action, True, think)


def env_action(reply: str, parsed: ParsedAction) -> str:
    """The string the environment receives for this reply.

    The parsed action when valid. Otherwise the raw reply, stripped and cut to
    ``MAX_RAW_ACTION_CHARS``: the environment still gets a turn (and normally
    rejects it), as in the reference, without a huge string in its logs.
    """
    if parsed.valid and parsed.action is not None:
        return parsed.action
    if not isinstance(reply, str):
        return ""
    return reply.strip()[:MAX_RAW_ACTION_CHARS]


# --------------------------------------------------------------------------- reply formats
#
# An environment says which reply format it expects (its suite's ``reply_format``; docs/environments.md,
# "Reply formats"). The prompt asks for that format, the parser reads it, and the environment receives what it
# parses: agentrl's own ``<action>X</action>`` hands the environment X; GEM's ``\boxed{X}`` hands it the whole
# ``\boxed{X}``, which GEM's games parse themselves.

ACTION_TAGS, BOXED, TOOLS = "action", "boxed", "tools"
REPLY_FORMATS: tuple[str, ...] = (ACTION_TAGS, BOXED)
BOXED_OPEN = "\\boxed{"


def parse_boxed(reply: str) -> ParsedAction:
    """Read the last ``\\boxed{X}`` of a reply, braces inside X balanced. X is kept as written (a game may read
    case: a crossword's letters), stripped; empty, unbalanced or with ``<`` it is invalid. A think block, if any,
    is read as `parse_action` reads it. Linear in the reply's length; never raises."""
    if not isinstance(reply, str):
        return _INVALID
    folded = reply.translate(_ASCII_LOWER)
    think_ok, think, think_end = _think_block(reply, folded)
    start = reply.rfind(BOXED_OPEN)
    if not think_ok or start < think_end or start < 0:
        return ParsedAction(None, False, think if think_ok else None)
    depth, pos = 1, start + len(BOXED_OPEN)
    while pos < len(reply) and depth:
        depth += {"{": 1, "}": -1}.get(reply[pos], 0)
        pos += 1
    action = reply[start + len(BOXED_OPEN) : pos - 1].strip() if depth == 0 else ""
    if not action or "<" in action:
        return ParsedAction(None, False, think)
    return ParsedAction(action, True, think)


def parse_reply(reply: str, reply_format: str = ACTION_TAGS) -> ParsedAction:
    """Parse a reply in the environment's format (`REPLY_FORMATS`)."""
    return parse_boxed(reply) if reply_format == BOXED else parse_action(reply)


def format_reply(action: str, reply_format: str = ACTION_TAGS) -> str:
    """An action written as a well-formed reply in the format: what the random policy and the experts reply. On the
    tool route (`TOOLS`), a JSON tool call in Hermes' ``<tool_call>`` tags, any other text as the final answer."""
    if reply_format == TOOLS:
        from agentrl.rollout.chat_tools import format_tool_reply

        return format_tool_reply(action)
    return f"{BOXED_OPEN}{action}}}" if reply_format == BOXED else f"{ACTION_OPEN}{action}{ACTION_CLOSE}"


def action_for_env(reply: str, parsed: ParsedAction, reply_format: str = ACTION_TAGS) -> str:
    """What the environment receives for a reply in the format: `env_action`'s, but a boxed action goes to the
    environment boxed, as its own parser expects."""
    if reply_format == BOXED and parsed.valid and parsed.action is not None:
        return format_reply(parsed.action, BOXED)
    return env_action(reply, parsed)
