"""What a tool-calling environment (env=tools) receives for one reply: the reply's text and its tool calls, as one
JSON string, so that an action stays a str across the worker pools.

A call is ``{"name": ..., "arguments": {...}}`` as the model wrote it, or ``{"error": KIND, "message": ...}``
where the reply's call could not be read (its JSON is broken, or the reply ended inside it). The environment
answers each call with that tool's message, errors included: a fault is the model's, never the run's.
"""

from __future__ import annotations

import json

# the kinds of tool error (rollout/tool_errors/<kind>): the first two are read from the reply, the rest are the
# environment's answer to a call it could not run
ERROR_KINDS = ("invalid_json", "cut_off", "unknown_tool", "bad_arguments", "tool_raised", "timeout")


def encode_action(content: str, calls: list[dict]) -> str:
    """The action string of a reply: its text (the final answer where it calls no tool) and its calls."""
    return json.dumps({"content": content, "tool_calls": calls}, default=str)


def decode_action(action: str) -> tuple[str, list[dict]]:
    """(content, calls) of an action string; text that is not one is a final answer without calls."""
    try:
        decoded = json.loads(action)
    except (TypeError, ValueError):
        return str(action), []
    if not isinstance(decoded, dict) or not isinstance(decoded.get("tool_calls"), list):
        return str(action), []
    return str(decoded.get("content") or ""), [c for c in decoded["tool_calls"] if isinstance(c, dict)]
