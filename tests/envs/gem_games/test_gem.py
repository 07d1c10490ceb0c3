"""env=gem on the real gem-llm package (the gem extra; skips without it): GEM's games through the Gymnasium-style
route, its \\boxed{} replies, its success rule and the ids that cannot run offline."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agentrl.config.envs import GemEnvConfig
from agentrl.envs.base import Task
from agentrl.errors import UserError
from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.policies import RandomPolicy

pytestmark = pytest.mark.gem


def suite_of(env_id: str, **overrides):
    from agentrl.envs.gem_games import build

    return build(OmegaConf.merge(OmegaConf.structured(GemEnvConfig), {"id": env_id, **overrides}))


def test_sokoban_shows_its_board_asks_for_boxed_replies_and_anchors_on_the_board():
    suite = suite_of("game:Sokoban-v0-easy")
    assert suite.reply_format == "boxed" and suite.max_steps == 20  # GEM's own max_turns
    env = suite.make_env()
    first = env.reset(Task("t", "sokoban", seed=7))
    assert "current board layout" in first.text and first.admissible_actions == ["up", "down", "left", "right"]
    assert first.anchor() == first.anchor_key and "#" in first.anchor_key  # the board, not the turn's message
    moved = env.step("\\boxed{left}")
    assert moved.action_valid and "At turn 1" in moved.observation.text


def test_the_random_policy_replies_boxed_and_the_env_parses_it():
    suite = suite_of("game:GuessTheNumber-v0-easy")
    tasks = [suite.task("eval_in_distribution", i) for i in range(20)]
    batch = collect(suite, tasks, 1, RandomPolicy(0), PromptSpec("generic", 2))
    assert all(c.startswith("\\boxed{") for c in batch.completion) and all(batch.valid)
    assert "\\boxed{}" in batch.prompt[0]  # the instruction asks for the env's own format
    assert 0 < sum(e.won for e in batch.episodes) < 20
    assert not any("not valid" in o for o in batch.observation)


def test_sokobans_partial_reward_at_its_limit_is_not_success():
    suite = suite_of("game:Sokoban-v0-easy", max_steps=None)
    env = suite.make_env()
    env.reset(Task("t", "sokoban", seed=3))
    steps = [env.step("\\boxed{up}") for _ in range(20)]
    assert steps[-1].done and not any(s.won for s in steps)


def test_a_reply_gem_cannot_parse_ends_the_episode_as_gem_rules():
    env = suite_of("game:Sokoban-v0-easy").make_env()
    env.reset(Task("t", "sokoban", seed=3))
    step = env.step("go up please")
    assert step.done and not step.won and step.reward < 0


@pytest.mark.parametrize(
    ("env_id", "says"),
    [
        ("game:Wordle-v0-easy", "cannot run here: it fetches NLTK's words corpus"),
        ("math:GSM8K", "cannot run here: it loads its data set from the Hugging Face hub"),
        ("game:Chess-v0", "is not a GEM id"),
        ("game:FifteenPuzzle-v0-random", "cannot run here: its reset raises"),
    ],
)
def test_an_id_that_cannot_run_here_is_one_line(env_id, says):
    with pytest.raises(UserError, match=says) as caught:
        suite_of(env_id)
    assert "\n" not in str(caught.value)


def test_a_misspelt_id_gets_the_closest_ids_not_every_id():
    with pytest.raises(UserError) as caught:
        suite_of("game:GuessTheNumbr-v0")
    line = str(caught.value)
    assert "did you mean game:GuessTheNumber-v0-" in line and "game:Sokoban" not in line
    assert line.endswith("(agentrl envs --gem game lists every game: id)") and len(line) < 300
    with pytest.raises(UserError, match=r"did you mean rg:leg_counting, .*agentrl envs --gem rg lists every rg: id"):
        suite_of("rg:leg_countin")
    with pytest.raises(UserError, match=r"is not a GEM id; GEM's families: code: .* rg: \(agentrl envs lists them\)$"):
        suite_of("nothing-like-it")


def test_agentrl_envs_lists_every_id_of_a_family(run_cli):
    from agentrl.envs.gem_games import registered_ids

    rg = [i for i in registered_ids() if i.startswith("rg:")]
    assert len(rg) > 100  # reasoning-gym's tasks (104 in gem-llm 0.1.0)
    listed = run_cli("envs", "--gem", "rg", env={"COLUMNS": "250"})
    assert listed.returncode == 0, listed.stderr
    assert all(f"{i} " in listed.stdout for i in rg) and "game:" not in listed.stdout
    assert f"({len(rg)} ids)" in listed.stdout
    every = run_cli("envs", env={"COLUMNS": "250"})
    assert "agentrl envs --gem rg" in every.stdout and "rg:leg_counting" not in every.stdout  # one row, a pointer
    wrong = run_cli("envs", "--gem", "rgg")
    assert wrong.returncode != 0 and "Traceback" not in wrong.stderr
    assert (
        wrong.stderr.strip()
        .splitlines()[-1]
        .startswith("error: agentrl envs --gem rgg: not a GEM family; GEM's families: code,")
    )


def test_an_id_without_a_random_action_says_which_models_can_play_it():
    suite = suite_of("game:TowerofHanoi-v0-easy")
    assert "use a pretrained model=" in suite.random_policy_problem
    assert suite_of("rg:basic_arithmetic").max_steps == 1  # one question, one answer


def test_agentrl_envs_lists_the_ids():
    from agentrl.envs.gem_games import id_status

    assert id_status("game:Sokoban-v0-easy") == "yes"
    assert id_status("game:Hangman-v0-easy").startswith("no: ")


def test_a_win_is_gems_announcement_not_a_reward_threshold():
    """Mastermind pays a progress reward for each new black peg: its winning step pays 0.5 or less, and wins."""
    from itertools import permutations

    env = suite_of("game:Mastermind-v0-easy", kwargs={"max_turns": 40}).make_env()  # room for every code
    env.reset(Task("t", "mastermind", seed=11))
    for a, b in permutations(range(1, 7), 2):
        step = env.step(f"\\boxed{{{a} {b}}}")
        if step.done:
            break
    assert step.won and step.reward < 1.0 and step.observation.text.startswith("Congratulations!")


def test_guess_the_number_has_binary_search_as_its_expert_and_mastermind_none():
    from agentrl.envs.base import has_expert
    from agentrl.rollout.demonstrations import ExpertPolicy

    suite = suite_of("game:GuessTheNumber-v0-easy")
    tasks = [suite.task("train", i) for i in range(40)]
    plans = [suite.expert_plan(task) for task in tasks]
    assert all(1 <= len(plan) <= 4 for plan in plans) and plans[0][0] == "5"  # the middle of 1-10 first
    batch = collect(suite, tasks, 1, ExpertPolicy(suite), PromptSpec("generic", 2))
    assert all(e.won for e in batch.episodes)
    assert batch.completion[0] == "\\boxed{5}"  # in GEM's reply format
    assert not has_expert(suite_of("game:Mastermind-v0-easy"))


def test_game2048s_greedy_expert_replays_exactly_through_the_collector():
    """The plan is played on a copy of the game in its RNG state: played in lockstep with the others through the
    collector (whose candidates draw GEM's random action), the real games draw the same tiles and end as planned."""
    from agentrl.envs.gem_games import greedy_2048_move
    from agentrl.rollout.demonstrations import ExpertPolicy

    suite = suite_of("game:Game2048-v0-easy")
    tasks = [suite.task("train", i) for i in range(12)]
    plans = [suite.expert_plan(task) for task in tasks]
    batch = collect(suite, tasks, 1, ExpertPolicy(suite), PromptSpec("compact", 0))
    assert [e.length for e in batch.episodes] == [len(p) for p in plans]
    won = [e.won for e in batch.episodes]
    assert 6 <= sum(won) < 12 and all(len(p) <= 50 for p in plans)
    assert batch.completion[0] == f"\\boxed{{{plans[0][0]}}}"
    env = suite.make_env()  # each move of a plan is the greedy move of the real board it is played on
    env.reset(tasks[0])
    for move in plans[0]:
        assert greedy_2048_move(env._env.unwrapped) == move
        env.step(f"\\boxed{{{move}}}")


def test_game2048s_log2_board_is_one_digit_a_cell_and_the_same_game():
    from agentrl.envs.gem_games import make_gem

    suite = suite_of("game:Game2048-v0-easy", kwargs={"board": "log2"})
    plain = suite_of("game:Game2048-v0-easy")
    env, gem_env = suite.make_env(), plain.make_env()
    first = env.reset(Task("t", "2048", seed=5))
    gem_env.reset(Task("t", "2048", seed=5))
    rows = first.text.splitlines()[1:5]
    assert all(len(row.split()) == 4 and all(len(c) == 1 for c in row.split()) for row in rows)
    for move in ["down", "left", "down", "right"]:
        mine, theirs = env.step(f"\\boxed{{{move}}}"), gem_env.step(f"\\boxed{{{move}}}")
        assert (
            mine.reward == theirs.reward
            and mine.observation.text.splitlines()[0] == theirs.observation.text.splitlines()[0]
        )
    board = env._env.unwrapped.board
    assert board == gem_env._env.unwrapped.board  # the same game under another rendering
    shown = [[int(c, 16) for c in row.split()] for row in env.step("\\boxed{up}").observation.text.splitlines()[2:6]]
    assert shown == [[c.bit_length() - 1 if c else 0 for c in row] for row in env._env.unwrapped.board]
    assert suite.expert_plan(suite.task("train", 0)) == plain.expert_plan(plain.task("train", 0))
    with pytest.raises(ValueError, match="not a board of game:Sokoban"):
        make_gem("game:Sokoban-v0-easy", board="log2")


def test_game2048s_word_board_shows_its_rows_and_columns_as_words():
    env = suite_of("game:Game2048-v0-easy", kwargs={"board": "words"}).make_env()
    env.reset(Task("t", "2048", seed=5))
    text = env.step("\\boxed{down}").observation.text
    board = env._env.unwrapped.board
    rows = text.split("Rows: ")[1].split("\n")[0].split()
    columns = text.split("Columns: ")[1].split("\n")[0].split()
    as_letters = [["abcdefghijkl"[c.bit_length() - 1 if c else 0] for c in row] for row in board]
    assert rows == ["".join(r) for r in as_letters] and columns == ["".join(c) for c in zip(*as_letters)]


def test_game2048s_words_moves_board_lists_the_moves_that_change_the_board():
    env = suite_of("game:Game2048-v0-easy", kwargs={"board": "words_moves"}).make_env()
    env.reset(Task("t", "2048", seed=3))
    for _ in range(3):
        step = env.step("\\boxed{down}")
    game = env._env.unwrapped
    slides = {"up": game._move_up, "down": game._move_down, "left": game._move_left, "right": game._move_right}
    moving = [m for m in ("down", "left", "right", "up") if slides[m]() != game.board]
    assert step.observation.admissible_actions == moving and len(moving) < 4  # seed 3: right moves nothing here
    assert "Rows: " in step.observation.text and step.action_valid
    stuck = env.step("\\boxed{right}")  # a move that leaves the board as it is: not in the list, an invalid action
    assert not stuck.action_valid and stuck.observation.admissible_actions == moving


def test_sokobans_search_expert_wins_through_the_collector_in_the_fewest_moves():
    from agentrl.envs.gem_games import sokoban_plan
    from agentrl.rollout.demonstrations import ExpertPolicy

    suite = suite_of("game:Sokoban-v0-easy", history_length=0)
    tasks = [suite.task("train", i) for i in range(8)]  # train task 8 has no plan within easy's 20 turns
    plans = [suite.expert_plan(task) for task in tasks]
    assert suite.expert_plan(suite.task("train", 8)) == []
    batch = collect(suite, tasks, 1, ExpertPolicy(suite), PromptSpec("compact", 0))
    assert all(e.won for e in batch.episodes) and [e.length for e in batch.episodes] == [len(p) for p in plans]
    assert batch.completion[0] == f"\\boxed{{{plans[0][0]}}}"
    env = suite.make_env()  # shortest: no plan one move shorter wins from the same room
    env.reset(tasks[0])
    game = env._env.unwrapped
    game.max_turns = len(plans[0]) - 1
    assert sokoban_plan(game) == []


def test_sokobans_word_board_shows_its_room_and_what_lies_each_way():
    env = suite_of("game:Sokoban-v0-easy", kwargs={"board": "words"}).make_env()
    first = env.reset(Task("t", "sokoban", seed=0))  # GEM's room: # # _ _ _ # / # _ X _ O # / # _ # O X # / # _ _ _ P #
    assert first.task_description.startswith("Sokoban: push every box onto a target within 20 turns;")
    assert "Rows: wfff fxft fwtx fffp\nColumns: wfff fxwf fftf ftxp\n" in first.text
    assert "Each way: up xtfw, left fffw\nEnter" in first.text and first.admissible_actions == ["up", "left"]
    text = env.step("\\boxed{up}").observation.text  # the box onto the target, the player to where it was
    assert "Rows: wfff fxfy fwtp ffff" in text and "Each way: up yfw, down fw," in text
