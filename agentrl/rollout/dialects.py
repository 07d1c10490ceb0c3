"""How a turn's prompt is written and how a reply is read: one interface, a dialect per way agents speak.

- `TextDialect`: agentrl's own text turns. Each prompt is built anew from a template (agentrl/rollout/prompts.py):
  the task, a window of the last (observation, action) pairs, the observation, the actions. The reply is read in
  the environment's reply format (agentrl/rollout/parsing.py): ``<action>X</action>`` or GEM's ``\\boxed{X}``.
- `ChatTools` (agentrl/rollout/chat_tools.py): the tool-calling route (env=tools). The prompt is the whole
  conversation in the model's chat template with its tools, and the reply's tool calls are read in the model
  family's own format.

The collectors (collector.py, ready_turns.py) ask a dialect for each turn (`turn`), for what the environment
receives from a reply (`read`), to move the conversation on after the environment answered (`advance`), and for
an episode's conversation as chat messages where it is one (`messages`, which `agentrl eval` writes); they never
ask which dialect they hold. `make_dialect` picks one from the suite's ``reply_format``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agentrl.rollout.parsing import ACTION_TAGS, action_for_env, parse_reply
from agentrl.rollout.prompts import HistoryWindow, build_prompt, prompt_tail

if TYPE_CHECKING:
    from agentrl.envs.base import Observation, Step, Task
    from agentrl.envs.workers import EnvFault
    from agentrl.rollout.collector import Reply, Turn

TOOLS = "tools"  # the reply format of the tool-calling route (a suite's reply_format)


@dataclass
class Reading:
    """What a reply says: whether it is well formed (`valid`), and the action the environment receives."""

    valid: bool
    action: str
    # the reply's ids where the dialect needed them and the policy gave none (a baseline's text reply)
    completion_ids: list[int] | None = None


class Dialect(Protocol):
    def open(self, task: Task) -> Any: ...  # an episode's conversation state

    def turn(self, conv: Any, observation: Observation, step: int, task: Task, episode: int) -> Turn | None: ...

    def read(self, turn: Turn, reply: Reply) -> Reading: ...

    def advance(self, conv: Any, turn: Turn, reply: Reply, reading: Reading, outcome: Step | EnvFault) -> None: ...

    def messages(self, conv: Any) -> list[dict] | None: ...  # the conversation as chat messages, where it is one


class TextDialect:
    """agentrl's text turns: a prompt built from a template and a bounded history window; a reply in the
    environment's reply format (``action`` or ``boxed``). With `max_chars`, a prompt keeps its last that many
    characters (prompts.prompt_tail)."""

    def __init__(self, template: str, history_length: int, reply_format: str = ACTION_TAGS, max_chars=None):
        self.template, self.history_length, self.reply_format = template, history_length, reply_format
        self.max_chars = max_chars

    def open(self, task: Task) -> HistoryWindow:
        return HistoryWindow(self.history_length)

    def turn(self, conv: HistoryWindow, observation: Observation, step: int, task: Task, episode: int) -> Turn:
        from agentrl.rollout.collector import Turn

        text = build_prompt(
            self.template,
            task=observation.task_description,
            observation=observation.text,
            admissible=observation.admissible_actions,
            history=conv.pairs,
            step=step,
            history_length=self.history_length,
            actions_text=observation.actions_text,
            reply_format=self.reply_format,
        )
        return Turn(
            prompt=prompt_tail(text, self.max_chars),
            observation=observation,
            task=task,
            step=step,
            episode=episode,
            reply_format=self.reply_format,
        )

    def read(self, turn: Turn, reply: Reply) -> Reading:
        parsed = parse_reply(reply.text, self.reply_format)
        return Reading(parsed.valid, action_for_env(reply.text, parsed, self.reply_format))

    def advance(self, conv: HistoryWindow, turn: Turn, reply: Reply, reading: Reading, outcome) -> None:
        conv.add(turn.observation.text, reading.action)

    def messages(self, conv: HistoryWindow) -> None:
        return None  # each prompt is written anew: the transcript's turns are the record


def make_dialect(prompt: Any, suite: Any, policy: Any = None) -> Dialect:
    """The dialect of a suite's environments (its ``reply_format``), with the prompt settings (`PromptSpec`). The
    tool-calling route renders with a tokenizer: the spec's, else the policy's; without either (a baseline), its
    prompts are text rendered from the chat template alone."""
    reply_format = getattr(suite, "reply_format", None) or ACTION_TAGS
    if reply_format != TOOLS:
        return TextDialect(prompt.template, prompt.history_length, reply_format, getattr(prompt, "max_chars", None))
    from agentrl.rollout.chat_tools import ChatTools

    tokenizer = getattr(prompt, "tokenizer", None) or getattr(policy, "tokenizer", None)
    sampling = getattr(policy, "sampling", None)
    budget = getattr(prompt, "max_prompt_tokens", None)
    if budget is None:
        budget = getattr(sampling, "max_prompt_tokens", None) or 2048
    return ChatTools(suite.tool_schemas, tokenizer=tokenizer, max_prompt_tokens=budget)
