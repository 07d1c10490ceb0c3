"""The embedded tiny model on the tool-calling route (env=tools): the build of agentrl/models/tiny.py with a chat
template that shows tools, and a warm-up on the environment's expert episodes.

Only env=tools builds this way, so household's build, and the shipped one, stay as they are. What differs:
- the chat template is Qwen2.5's tool template, as TRL ships it (TRL's response parser knows it by its text);
- ``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>``, ``<tools>`` and ``</tools>`` are
  added tokens beside ChatML's, so a call opens with one id;
- the BPE tokenizer is trained on the demonstration conversations rendered by that template, tools included;
- the warm-up pairs are ids, as a rollout makes them (agentrl/rollout/chat_tools.py): a turn's prompt ids are the
  conversation so far, its reply the expert's reply and the end-of-turn id. The demonstrations are the
  environment's expert (`env.expert`): there is no list of actions for a random policy to draw from.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"]
# Episodes of expert play the build learns from (each a few turns), unless model.tiny.demo_turns says otherwise.
DEMO_EPISODES = 1500


def build_tool_tokenizer(texts: list[str], vocab_size: int):
    """tiny.py's byte-level BPE tokenizer, trained on rendered conversations, with the tool tokens added and
    Qwen2.5's tool template as its chat template."""
    from agentrl.models.tiny_tokenizer import build_tokenizer
    from agentrl.rollout.chat_tools import qwen_tool_template

    tokenizer = build_tokenizer(texts, vocab_size)
    tokenizer.add_tokens(TOOL_TOKENS)
    tokenizer.chat_template = qwen_tool_template()
    return tokenizer


def _expert_play(suite, env_cfg: Any, tasks, tokenizer=None):
    """The expert's episodes on `tasks`: with a tokenizer, rows of ids as a rollout writes them; without, the
    conversations as text (rollout/demonstrations.py, `play_with_ids`)."""
    from agentrl.rollout.demonstrations import ExpertPolicy, play_with_ids

    doing = "tiny model: the expert's tool calls" + (" as ids" if tokenizer is not None else "")
    return play_with_ids(suite, env_cfg, ExpertPolicy(suite), tasks, doing, tokenizer)


def build_tiny_tool_model(tiny_cfg: Any, env_cfg: Any, out_dir: Path) -> None:
    """Build, warm up and save the tiny model of a tool-calling environment into `out_dir` (the module docstring)."""
    import torch

    from agentrl.envs.base import has_expert, within_split
    from agentrl.envs.registry import make_suite
    from agentrl.errors import UserError
    from agentrl.models.tiny import new_tiny_model, save_build, warm_up
    from agentrl.rollout.demonstrations import won_id_pairs

    torch.manual_seed(tiny_cfg.seed)
    started = time.time()
    episodes = tiny_cfg.demo_turns or DEMO_EPISODES
    log.info(
        "building the tiny model in %s first (first use; cached afterwards): %d episodes of the expert's tool calls, "
        "then up to %d warm-up steps",
        out_dir.parent,
        episodes,
        tiny_cfg.warmup_steps,
    )
    suite = make_suite(env_cfg, faults=False)
    if not has_expert(suite):
        raise UserError(
            "model=tiny on env=tools warms up on the environment's expert: set env.expert=MODULE:FUNCTION, or use a "
            "pretrained model= (agentrl models list)"
        )
    first = 1_000_000 + tiny_cfg.seed * 10_000
    tasks = [suite.task("train", within_split(suite, "train", first + i)) for i in range(episodes)]
    text = _expert_play(suite, env_cfg, tasks)
    tokenizer = build_tool_tokenizer(list(text.prompt) + list(text.completion), tiny_cfg.vocab_size)
    pairs = won_id_pairs(_expert_play(suite, env_cfg, tasks, tokenizer))
    if not pairs:
        raise UserError("the expert (env.expert) won no episode: the tiny model has nothing to warm up on")
    model = new_tiny_model(tiny_cfg, tokenizer, max_positions=4096)
    model, losses = warm_up(model, tokenizer, pairs, tiny_cfg)
    longest = max(len(ids) for ids, _ in pairs)
    report = save_build(out_dir, model, tokenizer, losses, len(pairs), started, longest_pair_tokens=longest)
    log.info("tiny tool model ready: %s", report)
