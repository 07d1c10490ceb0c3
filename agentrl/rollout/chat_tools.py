"""The tool-calling dialect (env=tools): the conversation in the model's own chat template, replies read as its
tool calls.

- Turn 0's prompt is the task's messages rendered by ``tokenizer.apply_chat_template(messages, tools=schemas,
  add_generation_prompt=True)``.
- Turn t+1's prompt ids are turn t's prompt ids, the ids the model sampled, and the ids of the tool messages'
  suffix, TRL's rule (`GRPOTrainer._tool_call_loop`): the conversation is never re-rendered or re-tokenised, so a
  row's ids are exactly the ids the model was conditioned on and sampled (a template that rewrites past turns, or
  text that tokenises otherwise the second time, would give rows ids the model never saw). The suffix is the
  difference between a dummy conversation rendered with and without the tool messages, cut at the end-of-turn id
  (TRL's `_get_tool_suffix_ids`, which is private to its trainer, written again here). A reply that stopped
  without its end-of-turn id (cut at ``rollout.max_new_tokens``) gets that id appended in the next prompt, where
  it is a prompt token, never trained on.
- A prompt may not grow past ``rollout.max_prompt_tokens``: a turn that would is not played, the episode ends and
  counts as ``truncated``, unscored (reward 0, not a success; TRL scores a cut sample: docs/environments.md names
  the difference). Nothing is cut from the left (that would drop the tools' header).
- A reply is read with TRL's ``parse_response`` where TRL knows the template (``add_response_schema``: Qwen2.5 and
  3, Llama 3.x and others). Elsewhere, and where TRL's parser fails on a malformed call (it then returns the whole
  reply as text), Hermes' ``<tool_call>{json}</tool_call>`` blocks are read here, each broken block becoming an
  ``invalid_json`` error the environment returns to the model. A reply without a tool call is the final answer.
  A reply is invalid (``rollout/invalid_rate``) where a call's JSON is broken, or where it has no end-of-turn id:
  a reply cut inside a tool call is never read as a final answer.
- A template that drops tools (it renders the same text with and without them) gets Qwen2.5's tool template, which
  TRL ships, where the tokenizer speaks ChatML (``<|im_start|>``: SmolLM2, the tiny model); otherwise the run is
  refused in one line.

Without a tokenizer (a baseline policy, a demonstration for the tiny model's build, before its tokenizer exists)
the prompts are text, rendered from the messages with Qwen2.5's tool template.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from agentrl.envs.tools_calls import decode_action, encode_action
from agentrl.errors import UserError
from agentrl.rollout.dialects import Reading

log = logging.getLogger(__name__)

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|$)", re.DOTALL)
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_tool_7f3a",
        "description": "probe",
        "parameters": {"type": "object", "properties": {"x": {"type": "string", "description": "x"}}},
    },
}


def qwen_tool_template() -> str:
    """Qwen2.5's chat template with tools, as TRL ships it (TRL's response parser knows it by its text)."""
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def ensure_tool_template(tokenizer) -> None:
    """Make sure the tokenizer's chat template shows tools: a template that drops them gets Qwen2.5's where the
    tokenizer speaks ChatML (said in one warning line), else the run is refused in one line."""
    messages = [{"role": "user", "content": "hi"}]
    try:
        plain = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        with_tools = tokenizer.apply_chat_template(
            messages, tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True
        )
    except Exception as err:  # a template without a chat template at all, or one that fails on tools
        plain, with_tools = "", ""
        log.debug("chat template probe failed: %s", err)
    if with_tools != plain and "probe_tool_7f3a" in with_tools:
        return
    if "<|im_start|>" in tokenizer.get_vocab():
        log.warning(
            "the model's chat template drops tools: using Qwen2.5's tool template (ChatML, which this tokenizer speaks)"
        )
        tokenizer.chat_template = qwen_tool_template()
        return
    raise UserError(
        "the model's chat template shows no tools and its tokenizer does not speak ChatML, so no tool template can "
        "be supplied: use a model whose chat template takes tools= (docs/environments.md, 'Tool-calling agents')"
    )


def response_parser(tokenizer) -> bool:
    """Whether TRL's `parse_response` can read this tokenizer's template (it sets the parser where it can)."""
    from trl.chat_template_utils import add_response_schema

    if getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None):
        return True
    try:
        add_response_schema(tokenizer)
    except ValueError:
        return False
    return True


def hermes_calls(text: str) -> list[dict]:
    """The ``<tool_call>{json}</tool_call>`` blocks of a reply (Hermes' format, Qwen's): each a call, or an
    ``invalid_json`` / ``cut_off`` error where its block cannot be read."""
    calls = []
    for match in _CALL_BLOCK.finditer(text):
        body, closed = match.group(1).strip(), match.group(0).endswith(TOOL_CALL_CLOSE)
        if not closed:
            calls.append({"error": "cut_off", "message": "the tool call was not closed with </tool_call>"})
            continue
        try:
            call = json.loads(body)
        except ValueError as err:
            calls.append({"error": "invalid_json", "message": f"the tool call is not valid JSON ({err})"})
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            calls.append({"error": "invalid_json", "message": 'a tool call is {"name": ..., "arguments": {...}}'})
            continue
        calls.append({"name": call["name"], "arguments": call.get("arguments", {})})
    return calls


def format_tool_reply(action: str) -> str:
    """An expert's or a baseline's action written as a reply in Hermes' format: a JSON tool call
    (``{"name": ..., "arguments": ...}``) in ``<tool_call>`` tags, any other text as the final answer."""
    try:
        call = json.loads(action)
    except (TypeError, ValueError):
        return action
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        body = json.dumps({"name": call["name"], "arguments": call.get("arguments", {})})
        return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"
    return action


@dataclass
class Conversation:
    """One episode's conversation: its messages, and with a tokenizer the ids of the next prompt."""

    messages: list[dict] = field(default_factory=list)
    ids: list[int] | None = None  # the next turn's prompt ids (None before turn 0 is rendered)
    ended: bool = False


class ChatTools:
    """The tool-calling dialect (the module docstring)."""

    def __init__(self, schemas: list[dict], *, tokenizer=None, max_prompt_tokens: int = 2048):
        self.schemas, self.tokenizer, self.max_prompt_tokens = list(schemas), tokenizer, int(max_prompt_tokens)
        self.parses = False
        if tokenizer is not None:
            ensure_tool_template(tokenizer)
            self.parses = response_parser(tokenizer)
            self.eos_id = tokenizer.eos_token_id
            self._suffixes: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ the dialect

    def open(self, task) -> Conversation:
        return Conversation()

    def turn(self, conv: Conversation, observation, step: int, task, episode: int):
        from agentrl.rollout.collector import Turn

        if not conv.messages:  # turn 0: the task's opening messages
            conv.messages = [dict(m) for m in observation.messages or [{"role": "user", "content": observation.text}]]
            if self.tokenizer is not None:
                conv.ids = self._encode(self._render(conv.messages, tools=True, generation=True))
        if self.tokenizer is None:
            text, ids = self._render(conv.messages, tools=True, generation=True), None
        else:
            ids = list(conv.ids)
            if len(ids) > self.max_prompt_tokens:
                return None
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return Turn(
            prompt=text,
            observation=observation,
            task=task,
            step=step,
            episode=episode,
            reply_format="tools",
            prompt_ids=ids,
            messages=[dict(m) for m in conv.messages],
        )

    def read(self, turn, reply) -> Reading:
        ids = reply.completion_ids
        if ids is None and self.tokenizer is not None:
            ids = self._encode(reply.text) + [self.eos_id]
        ended = ids is None or (len(ids) > 0 and ids[-1] == self.eos_id)
        text = reply.text if ids is None else self.tokenizer.decode(ids, skip_special_tokens=True)
        content, calls = text, None
        if self.parses and ids is not None and ended:
            from trl.chat_template_utils import parse_response

            parsed = parse_response(self.tokenizer, ids, prefix=turn.prompt_ids, tools=self.schemas)
            if parsed.get("tool_calls"):
                calls = [_call_of(c) for c in parsed["tool_calls"]]
                content = parsed.get("content") or ""
        if calls is None:  # no parser for the template, or TRL's fell back to text: read Hermes' blocks
            calls = hermes_calls(text)
            content = _CALL_BLOCK.sub("", text).strip() if calls else text.strip()
        if not ended and TOOL_CALL_OPEN in text:  # a reply cut inside a call is never a final answer
            calls = [c for c in calls if "error" in c] or [{"error": "cut_off", "message": "the reply was cut off"}]
        valid = ended and not any("error" in c for c in calls)
        return Reading(valid, encode_action(content, calls), completion_ids=ids)

    def advance(self, conv: Conversation, turn, reply, reading: Reading, outcome) -> None:
        """The reply and the tool messages join the conversation (the last turn's too: `messages`); the next
        prompt's ids follow where the episode goes on."""
        observation = getattr(outcome, "observation", None)
        content, calls = decode_action(reading.action)
        assistant: dict[str, Any] = {"role": "assistant", "content": content}
        named = [c for c in calls if "name" in c and "error" not in c]
        if named:
            assistant["tool_calls"] = [
                {"type": "function", "function": {"name": c["name"], "arguments": c.get("arguments") or {}}}
                for c in named
            ]
        tool_messages = list(observation.messages or []) if observation is not None else []
        conv.messages += [assistant, *tool_messages]
        if getattr(outcome, "done", True) or observation is None or self.tokenizer is None:
            return
        completion = list(reading.completion_ids or [])
        if not completion or completion[-1] != self.eos_id:
            completion.append(self.eos_id)  # a prompt token here: the turn ends where the template ends it
        conv.ids = list(turn.prompt_ids) + completion + self.suffix_ids(tool_messages)

    def messages(self, conv: Conversation) -> list[dict]:
        return [dict(m) for m in conv.messages]

    # ------------------------------------------------------------------ rendering

    def suffix_ids(self, tool_messages: list[dict]) -> list[int]:
        """The ids that follow an assistant turn's end-of-turn id: the tool messages and the next generation
        prompt, from a dummy conversation rendered with and without them."""
        if not tool_messages:
            return []
        dummy_call = [{"type": "function", "function": {"name": tool_messages[0].get("name", "tool"), "arguments": {}}}]
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": dummy_call}]
        before = self._encode(self._render(dummy, generation=False))
        after = self._encode(self._render(dummy + tool_messages, generation=True))
        ends = [i for i, token in enumerate(before) if token == self.eos_id]
        if not ends or after[: ends[-1] + 1] != before[: ends[-1] + 1]:
            raise UserError(
                "the chat template does not keep an assistant turn as it is when tool messages follow it, so the "
                "tool results cannot be appended to the sampled ids: use a prefix-preserving template"
            )
        return after[ends[-1] + 1 :]

    def _render(self, messages: list[dict], *, tools: bool = False, generation: bool) -> str:
        schemas = self.schemas if tools else None
        if self.tokenizer is not None:
            return self.tokenizer.apply_chat_template(
                messages, tools=schemas, tokenize=False, add_generation_prompt=generation
            )
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, _ = render_jinja_template(
            [messages], tools=schemas, chat_template=qwen_tool_template(), add_generation_prompt=generation
        )
        return rendered[0]

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


def _call_of(call: dict) -> dict:
    function = call.get("function", call)
    return {"name": str(function.get("name")), "arguments": function.get("arguments", {})}
