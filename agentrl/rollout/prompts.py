"""The text of one agent turn.

Training is step-wise, as in verl-agent: every turn is its own prompt, built from
the task, a bounded window of the last (observation, action) pairs, the current
observation and the admissible actions. History is never concatenated into one
growing sequence.

Templates (``TEMPLATES``):

- ``"alfworld"``: verl-agent's ALFWorld prompt
  (``agent_system/environments/prompts/alfworld.py``), with the no-history variant
  on the first turn. Deviations: the reference's leading and trailing newlines are
  dropped, its typo "observaitons" is spelled "observations", and the no-history
  variant keeps the task sentence (later reference versions have it too).
- ``"scienceworld"``: EPO's ScienceWorld prompt
  (``agent_system/environments/prompts/sciworld.py``, the non-meta-think pair): the
  command reference, then the environment's action summary (``actions_text``: the
  action templates and the objects in view) in place of the list of every valid
  command, which has hundreds of entries. Deviations: leading and trailing
  newlines dropped; the history lines are agentrl's window (the last H pairs, with
  their step numbers), where the reference also lists every older action.
- ``"generic"``: the alfworld template's structure and instruction without its ALFRED sentence, for
  environments agentrl did not make (env=gym, env=gem): the task, the window, the observation, the actions.
- ``"compact"``: the same information in as few tokens as possible, for tiny
  models with short contexts. No think instruction. With ``actions_text`` it shows
  that summary instead of the list.

An environment that lists no actions (a question to answer, such as GEM's ``rg:`` tasks) gets no actions line,
and the alfworld family's instruction asks for "your action" rather than "an admissible action": an empty list
would ask the model to choose one of nothing. Where actions are listed, the text is the reference's, unchanged.
"""

from __future__ import annotations

from collections import deque

TEMPLATES: tuple[str, ...] = ("alfworld", "scienceworld", "compact", "generic")

_ALFWORLD_INSTRUCTION = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. "
    "This reasoning process MUST be enclosed within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action "
    "for current step and present it within <action> </action> tags."
)

# The instruction where the environment lists no actions: the same sentence, without "an admissible action"
_OPEN_INSTRUCTION = _ALFWORLD_INSTRUCTION.replace(
    "choose an admissible action for current step", "choose your action for the current step"
)
_ACTIONS_LINE = "Your admissible actions of the current situation are: [{admissible}].\n\n"

ALFWORLD_TEMPLATE_NO_HIS = (
    "You are an expert agent operating in the ALFRED Embodied Environment. "
    "Your task is to: {task}\n"
    "Your current observation is: {observation}\n"
    "Your admissible actions of the current situation are: [{admissible}].\n\n" + _ALFWORLD_INSTRUCTION
)

ALFWORLD_TEMPLATE = (
    "You are an expert agent operating in the ALFRED Embodied Environment. "
    "Your task is to: {task}\n"
    "Prior to this step, you have already taken {step_count} step(s). "
    "Below are the most recent {history_length} observations and the corresponding "
    "actions you took: {history}\n"
    "You are now at step {current_step} and your current observation is: {observation}\n"
    "Your admissible actions of the current situation are: [{admissible}].\n\n" + _ALFWORLD_INSTRUCTION
)


_SCIENCEWORLD_COMMANDS = (
    ("open OBJ", "open a container"),
    ("close OBJ", "close a container"),
    ("activate OBJ", "activate a device"),
    ("deactivate OBJ", "deactivate a device"),
    ("connect OBJ to OBJ", "connect electrical components"),
    ("disconnect OBJ", "disconnect electrical components"),
    ("use OBJ [on OBJ]", "use a device/item"),
    ("look around", "describe the current room"),
    ("look at OBJ", "describe an object in detail"),
    ("look in OBJ", "describe a container's contents"),
    ("read OBJ", "read a note or book"),
    ("move OBJ to OBJ", "move an object to a container"),
    ("pick up OBJ", "move an object to the inventory"),
    ("put down OBJ", "drop an inventory item"),
    ("pour OBJ into OBJ", "pour a liquid into a container"),
    ("dunk OBJ into OBJ", "dunk a container into a liquid"),
    ("mix OBJ", "chemically mix a container"),
    ("go to LOC", "move to a new location"),
    ("eat OBJ", "eat a food"),
    ("flush OBJ", "flush a toilet"),
    ("focus on OBJ", "signal intent on a task object"),
    ("wait", "take no action for 10 iterations"),
    ("wait1", "take no action for 1 iteration"),
    ("task", "describe current task"),
    ("inventory", "list your inventory"),
)
_SCIENCEWORLD_HEAD = (
    "You are an expert agent operating in the ScienceWorld environment, which is a text-based virtual "
    "environment centered around accomplishing tasks from the elementary science curriculum.\n"
    "Your current task is: {task}\n\n"
)
_SCIENCEWORLD_TAIL = (
    "Here are the actions you may take:\n[\n"
    + "\n".join(f'{{{{"action": "{a}", "description": "{d}"}}}},' for a, d in _SCIENCEWORLD_COMMANDS).rstrip(",")
    + "\n]\n\nCurrent available actions:\n{actions}\n\n"
    "Now it's your turn to take an action. You should first reason step-by-step about the current situation. "
    "This reasoning process MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an appropriate action for the current step and "
    "present it within <action> </action> tags."
)
SCIENCEWORLD_TEMPLATE_NO_HIS = _SCIENCEWORLD_HEAD + "Your current observation is: {observation}\n" + _SCIENCEWORLD_TAIL
SCIENCEWORLD_TEMPLATE = (
    _SCIENCEWORLD_HEAD + "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
    "{history_length} observations and the corresponding actions you took: {history}\n"
    "You are now at step {current_step} and your current observation is: {observation}\n" + _SCIENCEWORLD_TAIL
)


class HistoryWindow:
    """The last ``length`` (observation, action) pairs of one episode."""

    def __init__(self, length: int):
        if length < 0:
            raise ValueError(f"history length must be >= 0, got {length}")
        self.length = length
        self._pairs: deque[tuple[str, str]] = deque(maxlen=length)

    def add(self, observation_text: str, action_text: str) -> None:
        """Record the observation a step was taken from and the action sent."""
        self._pairs.append((observation_text, action_text))

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """Oldest first; a copy, so callers may keep it."""
        return list(self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)


def _recent(history: list[tuple[str, str]], step: int, history_length: int) -> list[tuple[str, str]]:
    if history_length < 0:
        raise ValueError(f"history_length must be >= 0, got {history_length}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    window = list(history)[-history_length:] if history_length > 0 else []
    if len(window) > step:
        # The window holds the pairs of steps step-k .. step-1; more pairs than
        # steps taken means the caller passed the wrong history or step.
        raise ValueError(f"{len(window)} history pairs but only {step} step(s) taken")
    return window


def _numbered_history(window: list[tuple[str, str]], step: int) -> str:
    """The window as the reference's lines, each pair numbered by its real 1-based step in the episode."""
    first = step - len(window) + 1  # 1-based index of the oldest pair in the window
    return "\n".join(
        f"[Observation {first + j}: '{obs}', Action {first + j}: '{act}']" for j, (obs, act) in enumerate(window)
    )


def _without_actions(template: str) -> str:
    """An alfworld-family template for an environment that lists no actions: no actions line, the open instruction."""
    if _ACTIONS_LINE not in template or _ALFWORLD_INSTRUCTION not in template:
        raise ValueError("the template has no actions line and instruction to replace")
    return template.replace(_ACTIONS_LINE, "\n").replace(_ALFWORLD_INSTRUCTION, _OPEN_INSTRUCTION)


def _with_history(no_history: str, with_history: str, task, observation, window, step, actions: str) -> str:
    """A template of the alfworld family filled in: its no-history variant where the window is empty, its
    no-actions variant where ``actions`` is empty."""
    if not actions:
        no_history, with_history = _without_actions(no_history), _without_actions(with_history)
    if not window:
        return no_history.format(task=task, observation=observation, admissible=actions)
    return with_history.format(
        task=task,
        step_count=step,
        history_length=len(window),
        history=_numbered_history(window, step),
        current_step=step + 1,
        observation=observation,
        admissible=actions,
    )


def _alfworld(task, observation, admissible, window, step, actions_text=None) -> str:
    # The reference quotes each action and leaves out ALFWorld's "help" command.
    actions = "\n ".join(f"'{a}'" for a in admissible if a != "help")
    return _with_history(ALFWORLD_TEMPLATE_NO_HIS, ALFWORLD_TEMPLATE, task, observation, window, step, actions)


def _scienceworld(task, observation, admissible, window, step, actions_text=None) -> str:
    actions = actions_text if actions_text is not None else ", ".join(admissible)
    if not window:
        return SCIENCEWORLD_TEMPLATE_NO_HIS.format(task=task, observation=observation, actions=actions)
    first = step - len(window) + 1
    history = "".join(
        f"\n[Step {first + j}, Observation {first + j}: '{obs}', Action {first + j}: '{act}']"
        for j, (obs, act) in enumerate(window)
    )
    return SCIENCEWORLD_TEMPLATE.format(
        task=task,
        step_count=step,
        history_length=len(window),
        history=history.strip(),
        current_step=step + 1,
        observation=observation,
        actions=actions,
    )


GENERIC_TEMPLATE_NO_HIS = (
    "You are an expert agent playing a text environment. Your task is:\n{task}\n"
    "Your current observation is: {observation}\n"
    "Your admissible actions of the current situation are: [{admissible}].\n\n" + _ALFWORLD_INSTRUCTION
)
GENERIC_TEMPLATE = (
    "You are an expert agent playing a text environment. Your task is:\n{task}\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} "
    "observations and the corresponding actions you took: {history}\n"
    "You are now at step {current_step} and your current observation is: {observation}\n"
    "Your admissible actions of the current situation are: [{admissible}].\n\n" + _ALFWORLD_INSTRUCTION
)


def _generic(task, observation, admissible, window, step, actions_text=None) -> str:
    actions = actions_text if actions_text is not None else ", ".join(f"'{a}'" for a in admissible)
    return _with_history(GENERIC_TEMPLATE_NO_HIS, GENERIC_TEMPLATE, task, observation, window, step, actions)


def _compact(task, observation, admissible, window, step, actions_text=None) -> str:
    lines = [f"Task: {task}"]
    if window:
        lines.append("History: " + " ".join(f"[{obs} > {act}]" for obs, act in window))
    lines.append(f"Now: {observation}")
    actions = actions_text if actions_text is not None else " | ".join(admissible)
    if actions:
        lines.append("Actions: " + actions)
    lines.append(COMPACT_REPLY)
    return "\n".join(lines)


_BUILDERS = {"alfworld": _alfworld, "scienceworld": _scienceworld, "compact": _compact, "generic": _generic}

COMPACT_REPLY = "Reply <action>...</action>"
# What each reply format (rollout/parsing.py, REPLY_FORMATS) changes in the templates' instructions: the tags the
# instruction names. The default, agentrl's own tags, changes nothing.
_FORMAT_INSTRUCTIONS = {
    "boxed": (
        ("present it within <action> </action> tags.", "present it within \\boxed{}."),
        (COMPACT_REPLY, "Reply \\boxed{...}"),
    ),
}


def _in_format(prompt: str, reply_format: str) -> str:
    """The prompt's reply instruction in the environment's reply format. Only the instruction's own sentence
    changes: it is the prompt's last line in every template, so an observation that quotes it is left alone."""
    head, sep, last = prompt.rpartition("\n")
    for old, new in _FORMAT_INSTRUCTIONS.get(reply_format, ()):
        last = last.replace(old, new)
    return head + sep + last


def build_prompt(
    template: str,
    *,
    task: str,
    observation: str,
    admissible: list[str],
    history: list[tuple[str, str]],
    step: int,
    history_length: int,
    actions_text: str | None = None,
    reply_format: str = "action",
) -> str:
    """The prompt text of one turn.

    ``step`` is the number of steps already taken in the episode (0 on the first
    turn). ``history`` holds the most recent (observation, action) pairs, oldest
    first, of the steps just before this one; only the last ``history_length``
    are shown, numbered by their real 1-based step in the episode. With no pair
    to show (first turn, or ``history_length=0``) the alfworld template uses the
    reference's no-history variant. ``actions_text``, when the environment gives
    one (``Observation.actions_text``), replaces the admissible list in the
    scienceworld and compact templates. ``reply_format`` (the environment's, rollout/parsing.py) is the reply
    the instruction asks for: ``action`` (``<action>X</action>``) or ``boxed`` (``\\boxed{X}``).
    """
    if template not in _BUILDERS:
        raise ValueError(f"unknown prompt template {template!r}; valid: {', '.join(TEMPLATES)}")
    window = _recent(history, step, history_length)
    prompt = _BUILDERS[template](task, observation, list(admissible), window, step, actions_text)
    return prompt if reply_format == "action" else _in_format(prompt, reply_format)


# A prompt's ids are cut to the last `max_prompt_tokens` (rollout/policies.py, `chat_prompts_ids`). Its text is
# tokenised from its last `max_prompt_tokens * CHARS_PER_TOKEN_BOUND` characters only (`prompt_tail`): more than the
# ids kept wherever a token averages fewer characters (byte-level BPE: about 3 for the tiny model's 1024-entry
# vocabulary, about 4 for Qwen2.5's on English text). So an observation that is a game's whole log (tens of thousands
# of characters) costs the tokeniser, and the memory the build and the rows take, what the budget does.
CHARS_PER_TOKEN_BOUND = 8
# how far past the cut a tail looks for the start of a word (a whitespace character)
WORD_SEARCH_CHARS = 200


def prompt_tail(prompt: str, chars: int | None) -> str:
    """The prompt itself where it has at most `chars` characters (or `chars` is None), else its last `chars` from
    the first whitespace after the cut (within WORD_SEARCH_CHARS; at the cut where there is none)."""
    if chars is None or len(prompt) <= chars:
        return prompt
    cut = len(prompt) - chars
    space = next((i for i in range(cut, min(cut + WORD_SEARCH_CHARS, len(prompt))) if prompt[i].isspace()), cut)
    return prompt[space:]
