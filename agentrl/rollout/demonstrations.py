"""Demonstrations: a policy played on an environment's tasks through the collector, as (prompt, reply) pairs.

The same path as RL: `collect` builds every prompt with the run's template and history window, so a
demonstration's prompt is exactly what the policy will be asked at that turn. Two players use it:

- the tiny model's build, with a random admissible policy (agentrl/models/tiny.py);
- `agentrl sft`, with the environment's expert (`ExpertPolicy`: the suite's optional `expert_plan`,
  docs/environments.md), whose replies are in the format RL parses, `<action>X</action>`.

On the tool-calling route (env=tools) a pair is ids, as its rollout writes them (agentrl/rollout/chat_tools.py):
`play_with_ids` gives each expert reply the ids a sampling policy would (its text's ids and the end-of-turn id), so
each turn's prompt ids are the conversation so far, never re-rendered; `won_id_pairs` keeps a won episode's turns.
The tiny model's tool build and `agentrl sft` on env=tools both train on them.
"""

from __future__ import annotations

import os
from typing import Any

from agentrl.envs.base import EXPERT_PLAN, Task
from agentrl.envs.faults import check_fault_share
from agentrl.rollout.batch import StepBatch
from agentrl.rollout.collector import PromptSpec, Reply, Turn, collect
from agentrl.rollout.parsing import format_reply

# Worker processes that play demonstrations on an engine (at least env.num_workers).
BUILD_WORKERS = max(1, min(os.cpu_count() or 1, 4))
# The built-in household world, alone or played by a team: pure Python, microseconds a step.
IN_PROCESS_ENVS = ("household", "household_team")


def plays_in_process(env_name: str) -> bool:
    """Whether the environment steps in microseconds in this process (no engine, no worker processes)."""
    return env_name in IN_PROCESS_ENVS


class ExpertPolicy:
    """The environment's expert: for each episode, its task's `expert_plan` played in order, one action a turn.

    A plan is asked of the suite once per task, when the task's first turn comes. A turn past the end of its
    plan (an episode the plan did not win) replies `look`: such an episode is not won, and `won_pairs` drops it."""

    def __init__(self, suite):
        self.plan_of = getattr(suite, EXPERT_PLAN)
        self.plans: dict[str, list[str]] = {}

    def act(self, turns: list[Turn]) -> list[Reply]:
        return [Reply(text=format_reply(self._action(turn.task, turn.step), turn.reply_format)) for turn in turns]

    def _action(self, task: Task | None, step: int) -> str:
        if task is None:
            raise ValueError("the expert plays a plan: each turn must name its task (collector.Turn.task)")
        plan = self.plans.get(task.task_id)
        if plan is None:
            plan = self.plans[task.task_id] = [str(action) for action in self.plan_of(task)]
        return plan[step] if step < len(plan) else "look"


def play(
    suite,
    env_cfg: Any,
    policy,
    tasks: list[Task],
    doing: str,
    prompt_chars: int | None = None,
) -> StepBatch:
    """One episode of `policy` on each task, in lockstep, with the run's prompt template and history window.
    `doing` names the work in the progress report; `prompt_chars`, where set, keeps each prompt's last that many
    characters only (collector.PromptSpec.max_chars)."""
    from agentrl.envs.workers import make_pool
    from agentrl.progress import Phase

    spec = PromptSpec(env_cfg.prompt_template, env_cfg.history_length, prompt_chars)
    limit = env_cfg.max_steps or suite.max_steps
    # With an engine (ALFWorld, ScienceWorld, plug-ins: tens of ms a step, up to seconds a reset) the play is engine
    # time: worker processes run the episodes side by side. Outcomes come back in slot order, so the play is the
    # same. The built-in household world (alone or played by a team) steps in microseconds, where workers would only
    # add start-up.
    workers = env_cfg.num_workers if plays_in_process(env_cfg.name) else max(env_cfg.num_workers, BUILD_WORKERS)
    with (
        make_pool(suite.make_env, workers, env_cfg.step_timeout_s) as pool,
        Phase(f"{doing} ({len(tasks)} episodes in lockstep), turn", limit) as phase,
    ):
        # An engine with a process per episode (ScienceWorld's JVMs) says how many episodes may be live at once
        # (`max_live_episodes`): the episodes are then played that many at a time, on the same slots.
        live = getattr(suite, "max_live_episodes", None) or len(tasks)
        batches = [
            collect(
                suite,
                tasks[i : i + live],
                1,
                policy,
                spec,
                max_steps=env_cfg.max_steps,
                pool=pool,
                on_turn=phase.reach if i == 0 else None,  # the progress line follows the first batch
            )
            for i in range(0, len(tasks), live)
        ]
    batch = batches[0] if len(batches) == 1 else joined(batches)
    # a broken environment stops the play here, as it stops a training iteration: what is built from the play
    # (the tiny model's warm-up, agentrl sft's demonstrations) is not built and cached from part of its data
    faulted = sum(1 for episode in batch.episodes if episode.fault)
    limit = getattr(env_cfg, "max_fault_share", 0.5)  # a plug-in's own schema may predate the key
    check_fault_share(faulted, len(batch.episodes), limit, f"{doing} (env={env_cfg.name})")
    return batch


def joined(batches: list[StepBatch]) -> StepBatch:
    """The rows and episodes of several collect() batches as one batch (episode ids stay each batch's own)."""
    whole = StepBatch()
    for batch in batches:
        for name in StepBatch.ROW_COLUMNS:
            getattr(whole, name).extend(getattr(batch, name))
        whole.episodes.extend(batch.episodes)
    return whole


def won_pairs(batch: StepBatch) -> list[tuple[str, str]]:
    """(prompt, reply) of every turn of a won episode: the expert's demonstrations (a plan that did not win,
    or an episode whose environment broke, teaches nothing)."""
    return [(p, c) for p, c, won in zip(batch.prompt, batch.completion, batch.won) if won]


class WithReplyIds:
    """A text policy's replies with the ids a sampling policy gives: the text's ids and the end-of-turn id."""

    def __init__(self, policy, tokenizer):
        self.policy, self.tokenizer = policy, tokenizer

    def act(self, turns: list[Turn]) -> list[Reply]:
        replies = self.policy.act(turns)
        for turn, reply in zip(turns, replies):
            reply.prompt_ids = turn.prompt_ids
            ids = self.tokenizer(reply.text, add_special_tokens=False)["input_ids"]
            reply.completion_ids = [*ids, self.tokenizer.eos_token_id]
        return replies


def play_with_ids(
    suite, env_cfg: Any, policy, tasks: list[Task], doing: str, tokenizer=None, max_prompt_tokens: int = 10**9
) -> StepBatch:
    """The tool route's play (env=tools): one episode of `policy` on each task in lockstep, on `env.num_workers`
    workers. With a tokenizer, the rows hold ids as a rollout writes them (`WithReplyIds`), and a conversation that
    would pass `max_prompt_tokens` ends unplayed, as in a rollout; without, the conversations are text, rendered
    with Qwen2.5's tool template (the tiny model's tokenizer is trained on them)."""
    from agentrl.envs.workers import make_pool
    from agentrl.progress import Phase

    player = policy if tokenizer is None else WithReplyIds(policy, tokenizer)
    spec = PromptSpec(env_cfg.prompt_template, env_cfg.history_length, tokenizer, max_prompt_tokens)
    limit = env_cfg.max_steps or suite.max_steps
    with (
        make_pool(suite.make_env, env_cfg.num_workers, env_cfg.step_timeout_s) as pool,
        Phase(f"{doing} ({len(tasks)} episodes in lockstep), turn", limit) as phase,
    ):
        return collect(suite, tasks, 1, player, spec, max_steps=env_cfg.max_steps, pool=pool, on_turn=phase.reach)


def won_id_pairs(batch: StepBatch) -> list[tuple[list[int], list[int]]]:
    """(ids, completion mask) of every turn of a won episode played with ids (`play_with_ids`): the prompt's ids
    masked out, the reply's and its end-of-turn id trained on."""
    return [
        (p + c, [0] * len(p) + [1] * len(c))
        for p, c, won in zip(batch.prompt_ids, batch.completion_ids, batch.won)
        if won
    ]
