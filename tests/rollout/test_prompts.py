"""Prompt templates and the history window."""

import pytest

from agentrl.rollout.prompts import TEMPLATES, HistoryWindow, build_prompt

TASK = "put a clean apple in fridge."
ADMISSIBLE = ["go to fridge 1", "take apple 1 from table 1", "inventory", "help"]


def test_history_window_keeps_last_pairs():
    w = HistoryWindow(2)
    for i in range(5):
        w.add(f"obs {i}", f"act {i}")
    assert w.pairs == [("obs 3", "act 3"), ("obs 4", "act 4")]
    assert len(w) == 2
    w.pairs.append(("x", "y"))  # a copy: the window is unchanged
    assert len(w.pairs) == 2


def test_history_window_zero_keeps_nothing():
    w = HistoryWindow(0)
    w.add("obs", "act")
    assert w.pairs == []


def test_history_window_rejects_negative():
    with pytest.raises(ValueError):
        HistoryWindow(-1)


def test_alfworld_step0_uses_no_history_variant():
    p = build_prompt(
        "alfworld",
        task=TASK,
        observation="You are in a room.",
        admissible=ADMISSIBLE,
        history=[],
        step=0,
        history_length=2,
    )
    assert p.startswith("You are an expert agent operating in the ALFRED Embodied Environment. ")
    assert f"Your task is to: {TASK}\nYour current observation is: You are in a room.\n" in p
    assert "Prior to this step" not in p
    assert "[Observation" not in p
    assert "'go to fridge 1'\n 'take apple 1 from table 1'\n 'inventory'" in p
    assert "'help'" not in p  # the reference drops ALFWorld's help command
    assert "<think> </think>" in p and "<action> </action>" in p


def test_alfworld_history_numbering_uses_real_steps():
    w = HistoryWindow(2)
    for i in range(1, 6):  # steps 1..5 taken
        w.add(f"obs {i}", f"act {i}")
    p = build_prompt(
        "alfworld", task=TASK, observation="obs 6", admissible=ADMISSIBLE, history=w.pairs, step=5, history_length=2
    )
    assert "Prior to this step, you have already taken 5 step(s). " in p
    assert "Below are the most recent 2 observations and the corresponding actions you took: " in p
    assert "[Observation 4: 'obs 4', Action 4: 'act 4']\n[Observation 5: 'obs 5', Action 5: 'act 5']" in p
    assert "You are now at step 6 and your current observation is: obs 6\n" in p


def test_alfworld_bounds_a_long_history():
    history = [(f"obs {i}", f"act {i}") for i in range(1, 4)]
    p = build_prompt(
        "alfworld", task=TASK, observation="now", admissible=ADMISSIBLE, history=history, step=3, history_length=1
    )
    assert "[Observation 3: 'obs 3', Action 3: 'act 3']" in p
    assert "obs 2" not in p
    assert "most recent 1 observations" in p


def test_alfworld_history_length_zero_is_no_history_variant():
    p = build_prompt(
        "alfworld", task=TASK, observation="now", admissible=ADMISSIBLE, history=[("o", "a")], step=1, history_length=0
    )
    assert "Prior to this step" not in p


def test_more_history_than_steps_is_an_error():
    with pytest.raises(ValueError, match="history pairs"):
        build_prompt(
            "alfworld",
            task=TASK,
            observation="o",
            admissible=[],
            history=[("o", "a")],
            step=0,
            history_length=2,
        )


def test_compact_contains_task_and_every_action():
    history = [("in kitchen", "go to fridge 1"), ("fridge closed", "open fridge 1")]
    p = build_prompt(
        "compact",
        task=TASK,
        observation="fridge open",
        admissible=ADMISSIBLE,
        history=history,
        step=2,
        history_length=2,
    )
    assert TASK in p
    for a in ADMISSIBLE:
        assert a in p
    assert "[in kitchen > go to fridge 1] [fridge closed > open fridge 1]" in p
    assert "<action>" in p and "<think>" not in p
    alf = build_prompt(
        "alfworld",
        task=TASK,
        observation="fridge open",
        admissible=ADMISSIBLE,
        history=history,
        step=2,
        history_length=2,
    )
    assert len(p) < len(alf) / 2


def test_compact_step0_has_no_history_line():
    p = build_prompt("compact", task=TASK, observation="o", admissible=["look"], history=[], step=0, history_length=2)
    assert p == f"Task: {TASK}\nNow: o\nActions: look\nReply <action>...</action>"


def test_braces_in_text_are_kept():
    p = build_prompt(
        "alfworld",
        task="{task}",
        observation="{x}",
        admissible=["{y}"],
        history=[],
        step=0,
        history_length=2,
    )
    assert "Your task is to: {task}" in p and "{x}" in p and "'{y}'" in p


def test_unknown_template_lists_valid_ones():
    assert TEMPLATES == ("alfworld", "scienceworld", "compact", "generic")
    with pytest.raises(ValueError, match="alfworld, scienceworld, compact, generic"):
        build_prompt("webshop", task=TASK, observation="o", admissible=[], history=[], step=0, history_length=2)


def test_scienceworld_template_shows_the_action_summary_not_the_list():
    """EPO's ScienceWorld prompt: the command forms, then the environment's summary in place of every command."""
    summary = "Valid_actions: ['open OBJ'], OBJ needs to be replaced with one of the following objects: ['door']"
    kwargs = dict(task="boil water", admissible=["open door", "look around"], history_length=2, actions_text=summary)
    first = build_prompt("scienceworld", observation="o0", history=[], step=0, **kwargs)
    assert first.startswith("You are an expert agent operating in the ScienceWorld environment")
    assert "Your current task is: boil water" in first and "Your current observation is: o0" in first
    assert '{"action": "focus on OBJ", "description": "signal intent on a task object"}' in first
    assert f"Current available actions:\n{summary}\n" in first and "'open door'" not in first
    assert "Prior to this step" not in first and first.endswith("present it within <action> </action> tags.")
    later = build_prompt("scienceworld", observation="o3", history=[("o1", "a1"), ("o2", "a2")], step=3, **kwargs)
    assert "you have already taken 3 step(s). Below are the most recent 2 observations" in later
    assert "[Step 2, Observation 2: 'o1', Action 2: 'a1']\n[Step 3, Observation 3: 'o2', Action 3: 'a2']" in later
    assert "You are now at step 4 and your current observation is: o3" in later
    # without a summary the list itself is shown; the compact template takes the summary too
    assert "open door, look around" in build_prompt(
        "scienceworld", observation="o", history=[], step=0, **{**kwargs, "actions_text": None}
    )
    assert f"Actions: {summary}" in build_prompt("compact", observation="o", history=[], step=0, **kwargs)


@pytest.mark.parametrize("template", ["alfworld", "generic"])
def test_no_actions_listed_no_actions_line_and_no_choice_among_them(template):
    """A question to answer (GEM's rg: tasks) lists no actions: the prompt neither shows "[]" nor asks for an
    admissible action; the reply instruction stays the last line, so the reply format still rewrites it."""
    for history, step in (([], 0), ([("o1", "a1")], 1)):
        kwargs = dict(task=TASK, observation="o", admissible=[], history=history, step=step, history_length=2)
        p = build_prompt(template, **kwargs)
        assert "admissible" not in p and "[]" not in p
        assert "observation is: o\n\nNow it's your turn to take an action." in p
        assert p.endswith(
            "you should choose your action for the current step and present it within <action> </action> tags."
        )
        boxed = build_prompt(template, reply_format="boxed", **kwargs)
        assert boxed.endswith("choose your action for the current step and present it within \\boxed{}.")


def test_compact_with_no_actions_has_no_actions_line():
    p = build_prompt("compact", task=TASK, observation="o", admissible=[], history=[], step=0, history_length=2)
    assert p == f"Task: {TASK}\nNow: o\nReply <action>...</action>"


def test_listed_actions_keep_the_reference_text():
    """Where actions are listed the templates are the reference's, byte for byte (the tiny build fingerprints them)."""
    from agentrl.rollout.prompts import GENERIC_TEMPLATE_NO_HIS

    p = build_prompt("generic", task=TASK, observation="o", admissible=["look"], history=[], step=0, history_length=2)
    assert p == GENERIC_TEMPLATE_NO_HIS.format(task=TASK, observation="o", admissible="'look'")
    assert "Your admissible actions of the current situation are: ['look'].\n\n" in p
    assert p.endswith(
        "you should choose an admissible action for current step and present it within <action> </action> tags."
    )


@pytest.mark.gem
def test_a_gem_question_gets_no_empty_action_list():
    from agentrl.cli.launch import preflight
    from agentrl.envs.registry import make_suite

    cfg = preflight("train", ["env=gem", "env.id=rg:leg_counting"])
    suite = make_suite(cfg.env)
    obs = suite.make_env().reset(suite.task("train", 0))
    assert obs.admissible_actions == [] and obs.actions_text is None
    for template, last_line in (("generic", "present it within \\boxed{}."), ("compact", "\nReply \\boxed{...}")):
        p = build_prompt(
            template,
            task=obs.task_description,
            observation=obs.text,
            admissible=obs.admissible_actions,
            history=[],
            step=0,
            history_length=2,
            reply_format=suite.reply_format,
        )
        assert "legs" in p and "[]" not in p and "admissible" not in p and "Actions:" not in p
        assert p.endswith(last_line)
