"""env=tools: TRL-style tool environments, the chat-template dialect, and faults that stay the model's
(agentrl/envs/tools_env.py, agentrl/rollout/chat_tools.py)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from agentrl.config.envs import ToolsEnvConfig
from agentrl.envs.tools_suite import build
from agentrl.errors import UserError
from agentrl.rollout.collector import PromptSpec, Reply, collect

COUNTER = "tests.envs.toy_tools:Counter"


def env_cfg(**overrides):
    base = {"factory": COUNTER, "prompt": "Count.", "expert": "tests.envs.toy_tools:expert", "tool_timeout_s": 0.3}
    return OmegaConf.merge(OmegaConf.structured(ToolsEnvConfig), {**base, **overrides})


@pytest.fixture(scope="module")
def suite():
    return build(env_cfg(tools=["tests.envs.toy_tools:shout"]))


@pytest.fixture(scope="module")
def tokenizer(suite):
    """A small tool tokenizer (tiny_tools' recipe) trained on the expert's rendered conversations."""
    from agentrl.models.tiny_tools import _expert_play, build_tool_tokenizer

    played = _expert_play(suite, env_cfg(), [suite.task("train", i) for i in range(8)])
    return build_tool_tokenizer(list(played.prompt) + list(played.completion) + ["Error: unknown tool"], 400)


class Scripted:
    """Replies given per turn as text; ids as a sampling policy gives them (the text's ids, then the end id unless
    `cut`). It records the prompt ids each turn offered."""

    def __init__(self, tokenizer, replies: list[str], cut: tuple[int, ...] = ()):
        self.tokenizer, self.replies, self.cut, self.seen = tokenizer, replies, cut, []

    def act(self, turns):
        out = []
        for turn in turns:
            text = self.replies[min(turn.step, len(self.replies) - 1)]
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if turn.step not in self.cut:
                ids = ids + [self.tokenizer.eos_token_id]
            self.seen.append(list(turn.prompt_ids))
            out.append(Reply(text=text, prompt_ids=list(turn.prompt_ids), completion_ids=ids))
        return out


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def play(suite, tokenizer, replies, cut=(), max_prompt_tokens=4096):
    policy = Scripted(tokenizer, replies, cut)
    spec = PromptSpec("generic", 0, tokenizer=tokenizer, max_prompt_tokens=max_prompt_tokens)
    return collect(suite, [suite.task("train", 1)], 1, policy, spec, keep_transcripts=True), policy


def test_a_trl_class_is_a_suite_with_its_public_methods_and_tools_as_tools(suite):
    names = [s["function"]["name"] for s in suite.tool_schemas]
    assert sorted(names) == ["add", "explode", "shout", "wait"]  # not reset, get_reward, nor private ones
    assert suite.task("train", 0).seed != suite.task("eval_in_distribution", 0).seed  # held-out seeds are others


def test_turns_append_sampled_ids_and_tool_suffix_never_re_rendered(suite, tokenizer):
    batch, policy = play(suite, tokenizer, [call("add", amount=1), call("add", amount=2), "done"])
    assert len(batch) == 3 and batch.valid == [True, True, True]
    for t in range(2):  # turn t+1's prompt = turn t's prompt ids + the sampled ids + the tool message's suffix
        head = batch.prompt_ids[t] + batch.completion_ids[t]
        assert batch.prompt_ids[t + 1][: len(head)] == head
        suffix = tokenizer.decode(batch.prompt_ids[t + 1][len(head) :])
        assert "<tool_response>" in suffix and str(t * 2 + 1) in suffix
    assert batch.prompt_ids == policy.seen  # rows hold the ids the policy was given, exactly
    first = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Count. Reach 3."}],
        tools=suite.tool_schemas,
        tokenize=False,
        add_generation_prompt=True,
    )
    assert batch.prompt_ids[0] == tokenizer(first, add_special_tokens=False)["input_ids"]
    assert batch.reward == [0.0, 0.0, 1.0] and batch.episodes[0].won  # get_reward on the final answer
    assert batch.episodes[0].counts == {"tool_calls": 2, "tool_errors": 0}


@pytest.mark.parametrize(
    ("reply", "kind", "says"),
    [
        ('<tool_call>\n{"name": "add", "arguments": {"amount": 1}\n</tool_call>', "invalid_json", "not valid JSON"),
        (call("subtract", amount=1), "unknown_tool", "unknown tool 'subtract'"),
        (call("add"), "bad_arguments", "missing a required argument"),
        (call("add", amount=1, extra=2), "bad_arguments", "unexpected keyword argument"),
        (call("add", amount="one"), "bad_arguments", "must be integer, not str"),
        (call("explode", reason="x"), "tool_raised", "boom: x"),
        (call("wait", seconds=2.0), "timeout", "ran past 0.3 s"),
    ],
)
def test_each_fault_goes_back_to_the_model_and_the_episode_goes_on(suite, tokenizer, reply, kind, says):
    batch, _ = play(suite, tokenizer, [reply, call("add", amount=3), "done"])
    assert len(batch) == 3 and batch.episodes[0].won and batch.episodes[0].fault is None
    suffix = tokenizer.decode(batch.prompt_ids[1][len(batch.prompt_ids[0]) + len(batch.completion_ids[0]) :])
    assert "Error" in suffix and says in suffix
    assert batch.episodes[0].counts[f"tool_errors/{kind}"] == 1
    assert batch.valid[0] == (kind != "invalid_json")  # a broken call is a malformed reply; the others are well formed


def test_a_reply_cut_inside_a_call_is_invalid_and_never_a_final_answer(suite, tokenizer):
    batch, _ = play(suite, tokenizer, ['<tool_call>\n{"name": "add", "argu', call("add", amount=3), "done"], cut=(0,))
    assert batch.valid[:2] == [False, True] and len(batch) == 3
    assert batch.episodes[0].counts["tool_errors/cut_off"] == 1
    # the end-of-turn id the reply lacked is in the next prompt, never in a completion
    head = batch.prompt_ids[0] + batch.completion_ids[0]
    assert batch.prompt_ids[1][len(head)] == tokenizer.eos_token_id


def test_a_conversation_at_its_token_budget_ends_as_truncated(suite, tokenizer):
    batch, _ = play(suite, tokenizer, [call("add", amount=1)] * 8, max_prompt_tokens=0)
    assert len(batch) == 0 and batch.episodes[0].counts == {"truncated": 1}
    short = len(play(suite, tokenizer, ["done"])[0].prompt_ids[0])
    batch, _ = play(suite, tokenizer, [call("add", amount=1)] * 8, max_prompt_tokens=short + 30)
    assert 1 <= len(batch) < 8 and batch.episodes[0].counts["truncated"] == 1


def test_an_episode_keeps_its_conversation_with_calls_results_and_final_answer(suite, tokenizer):
    replies = [call("subtract", amount=1), call("add", amount=3), "done"]
    policy = Scripted(tokenizer, replies)
    spec = PromptSpec("generic", 0, tokenizer=tokenizer, max_prompt_tokens=4096)
    [episode] = collect(suite, [suite.task("train", 1)], 1, policy, spec, keep_transcripts=True).episodes
    roles = [m["role"] for m in episode.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert episode.messages[1]["tool_calls"][0]["function"] == {"name": "subtract", "arguments": {"amount": 1}}
    assert "unknown tool 'subtract'" in episode.messages[2]["content"]
    assert episode.messages[4] == {"role": "tool", "name": "add", "content": "3"}
    assert episode.messages[5]["content"] == "done" and "tool_calls" not in episode.messages[5]
    assert episode.counts == {"tool_calls": 2, "tool_errors": 1, "tool_errors/unknown_tool": 1}
    training = collect(suite, [suite.task("train", 1)], 1, Scripted(tokenizer, replies), spec)
    assert training.episodes[0].messages is None  # kept for evaluations, not for every rollout


def test_the_last_turn_results_stay_in_the_conversation_at_max_steps(tokenizer):
    capped = build(env_cfg(max_steps=2))
    policy = Scripted(tokenizer, [call("add", amount=1)])
    spec = PromptSpec("generic", 0, tokenizer=tokenizer, max_prompt_tokens=4096)
    [episode] = collect(capped, [capped.task("train", 1)], 1, policy, spec, keep_transcripts=True).episodes
    assert [m["role"] for m in episode.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert episode.messages[-1]["content"] == "2" and episode.counts["tool_calls"] == 2


def test_global_random_is_the_episode_own_and_replays(suite):
    first, second = suite.make_env(), suite.make_env()
    first.reset(suite.task("train", 4))
    second.reset(suite.task("train", 4))
    assert first.instance.noise == second.instance.noise
    third = suite.make_env()
    third.reset(suite.task("train", 5))
    assert third.instance.noise != first.instance.noise


def test_anchor_is_a_digest_of_the_calls_so_far(suite):
    env = suite.make_env()
    start = env.reset(suite.task("train", 1)).anchor()
    after = env.step(json.dumps({"content": "", "tool_calls": [{"name": "add", "arguments": {"amount": 1}}]}))
    assert after.observation.anchor() != start


def test_a_class_without_tools_is_a_question_answered_in_one_reply(tokenizer, caplog):
    with caplog.at_level("WARNING"):
        plain = build(env_cfg(factory="tests.envs.toy_tools:Riddle", reward_funcs=["tests.envs.toy_tools:said_yes"]))
    assert "has no tools" in caplog.text and plain.tool_schemas == []
    spec = PromptSpec("generic", 0, tokenizer=tokenizer, max_prompt_tokens=4096)
    for reply, won in (("yes", True), ("no", False)):
        batch = collect(plain, [plain.task("train", 1)], 1, Scripted(tokenizer, [reply]), spec, keep_transcripts=True)
        [episode] = batch.episodes
        assert [m["role"] for m in episode.messages] == ["user", "assistant"] and episode.won is won


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"factory": "tests.envs.no_such_module:Env"}, "does not import"),
        ({"factory": "tests.envs.toy_tools:NoReset"}, "without reset"),
        ({"factory": "tests.envs.toy_tools:Undocumented"}, "cannot be described"),
        ({"reward_funcs": ["tests.envs.toy_tools:wrong_reward"]}, "as TRL calls a reward function"),
        ({"prompt": None}, "needs its tasks"),
    ],
)
def test_bad_input_is_one_line_at_build(overrides, says):
    with pytest.raises(UserError, match=says) as caught:
        build(env_cfg(**overrides))
    assert "\n" not in str(caught.value)


def test_tasks_from_a_jsonl_dataset_hold_rows_out(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "Count."}], "seed": i} for i in range(10)]
    (tmp_path / "tasks.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    suite = build(env_cfg(prompt=None, dataset=str(tmp_path / "tasks.jsonl"), eval_rows=3))
    train = {suite.task("train", i).task_id.split("/")[1] for i in range(7)}
    held_out = {suite.task("eval_in_distribution", i).task_id.split("/")[1] for i in range(3)}
    assert len(train) == 7 and len(held_out) == 3 and not train & held_out
    env = suite.make_env()
    first = env.reset(suite.task("train", 0))
    assert first.messages[-1]["content"].startswith("Count. Reach")  # reset got the row's columns (seed)


CALCULATOR = [
    "env=tools",
    "env.factory=agentrl.examples.calculator:CalculatorEnv",
    "env.reward_funcs=[agentrl.examples.calculator:correct_answer]",
    "env.prompt=Compute with the calculate tool.",
    "env.expert=agentrl.examples.calculator:expert",
]
# the tiny model's products are too small for a second thread to pay, and on a shared machine two threads wait on
# each other: one thread runs the CLI tests of this route in seconds
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def test_tiny_on_tools_replies_long_enough_for_a_call_and_debug_fast_builds_small(hydra_conf):
    from hydra import compose

    from agentrl.config.typed import typed

    full = typed(compose(config_name="train", overrides=CALCULATOR))
    assert full.rollout.max_new_tokens == 48 and full.env.max_steps == 8 and full.model.tiny.demo_turns is None
    fast = typed(compose(config_name="train", overrides=[*CALCULATOR, "+debug=fast"]))
    assert fast.rollout.max_new_tokens == 48 and fast.env.max_steps == 4
    assert fast.model.tiny.demo_turns == 40 and fast.model.tiny.warmup_batch_size == 4
    given = typed(compose(config_name="train", overrides=[*CALCULATOR, "+debug=fast", "rollout.max_new_tokens=20"]))
    assert given.rollout.max_new_tokens == 20  # the command line still wins
    household = typed(compose(config_name="train", overrides=["+debug=fast"]))
    assert household.rollout.max_new_tokens == 16 and household.model.tiny.demo_turns is None  # nothing else changes


@pytest.mark.gem  # the calculator's questions come from reasoning-gym
def test_the_route_trains_end_to_end_on_the_tiny_model(run_cli, cache_dir, tmp_path):
    """`agentrl train env=tools +debug=fast` on the calculator example: the tiny model built from 40 expert
    episodes, two iterations and two evaluations, the tool metrics logged, a checkpoint saved."""
    result = run_cli(
        "train", *CALCULATOR, "+debug=fast", "logger=none", f"hydra.run.dir={tmp_path / 'run'}", env=ONE_THREAD
    )
    assert result.returncode == 0, result.stderr[-2000:]
    built = [json.loads(p.read_text()) for p in cache_dir.glob("tiny/tools-*/warmup.json")]
    assert built and built[0]["demonstration_pairs"] == 80  # 40 won expert episodes of two turns: call, answer
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "rollout/rows" in r]
    assert [r["iteration"] for r in trained] == [1, 2] and all(r["rollout/rows"] >= 4 for r in trained)
    assert all(0.0 <= r["rollout/invalid_rate"] <= 1.0 and "rollout/tool_calls" in r for r in trained)
    assert [r["iteration"] for r in records if "eval/success" in r] == [0, 2]
    assert (tmp_path / "run" / "checkpoints" / "last").exists()

    evaluated = run_cli(
        "eval", str(tmp_path / "run"), "eval.num_tasks=2", f"hydra.run.dir={tmp_path / 'eval'}", env=ONE_THREAD
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    episodes = [json.loads(line) for line in (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()]
    assert len(episodes) == 2
    for episode in episodes:  # the conversation as the model's chat: the task, then its replies and the tools' answers
        assert episode["messages"][0]["role"] == "user" and "calculate tool" in episode["messages"][0]["content"]
        assert [m["role"] for m in episode["messages"][1:]].count("assistant") == episode["length"]
        assert episode["counts"]["tool_calls"] == sum(len(m.get("tool_calls", [])) for m in episode["messages"]) + sum(
            episode["counts"].get(f"tool_errors/{kind}", 0) for kind in ("invalid_json", "cut_off")
        )


def test_sft_pairs_are_the_ids_a_rollout_writes(suite, tokenizer):
    """`agentrl sft` on env=tools trains on (ids, mask): each turn's prompt the conversation so far in the chat
    template with tools, extended by the ids sampled and the tool messages, never re-rendered; the mask on the reply
    and its end-of-turn id only."""
    from agentrl.train.sft import tool_expert_pairs

    cfg = OmegaConf.create(
        {"env": env_cfg(), "sft": {"first_task": 0, "episodes": 3}, "rollout": {"max_prompt_tokens": 4096}}
    )
    pairs = tool_expert_pairs(suite, cfg, tokenizer)
    assert len(pairs) == 6  # 3 won episodes of two turns: the call, the answer
    (first, first_mask), (second, second_mask) = pairs[0], pairs[3]  # rows in lockstep order: task 0's two turns
    task = suite.task("train", 0)
    opening = suite.make_env().reset(task).messages
    rendered = tokenizer.apply_chat_template(
        opening, tools=suite.tool_schemas, tokenize=False, add_generation_prompt=True
    )
    prompt = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    reply = first[len(prompt) :]
    assert first[: len(prompt)] == prompt and first_mask == [0] * len(prompt) + [1] * len(reply)
    assert reply[-1] == tokenizer.eos_token_id and '"name": "add"' in tokenizer.decode(reply)
    assert second[: len(first)] == first  # turn 1's prompt goes on from turn 0's ids
    suffix = tokenizer.decode(second[len(first) : second_mask.index(1)])
    assert "<tool_response>" in suffix and tokenizer.decode(second[second_mask.index(1) :]).startswith("done")
    short = OmegaConf.merge(cfg, {"rollout": {"max_prompt_tokens": 10}})
    with pytest.raises(UserError, match="rollout.max_prompt_tokens=10"):
        tool_expert_pairs(suite, short, tokenizer)


@pytest.mark.gem  # the calculator's questions come from reasoning-gym
def test_sft_clones_the_expert_on_the_tool_route(run_cli, tmp_path):
    """`agentrl sft env=tools` on the tiny model: the expert's tool calls as ids, fine-tuned on, a model folder."""
    run = tmp_path / "sft"
    result = run_cli(
        "sft",
        *CALCULATOR,
        "+debug=fast",
        "sft.episodes=8",
        "sft.epochs=1",
        "sft.batch_size=4",
        "sft.eval_before=false",
        "eval.num_tasks=2",
        f"hydra.run.dir={run}",
        env=ONE_THREAD,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads((run / "sft.json").read_text())
    assert results["expert_success"] == 1.0 and results["pairs"] == 16  # 8 episodes: a call and an answer each
    assert len(results["losses"]) == 4 and "eval/tool_calls" in results["after"]  # 16 pairs, 4 a step, one pass
    assert (run / "model" / "config.json").is_file()


@pytest.mark.gem  # the calculator's questions come from reasoning-gym
def test_the_calculator_mixed_expert_answers_right_half_by_the_tool_half_directly():
    """smollm2_calculator_cpu's clone: correct episodes, by the calculator for about half of the questions and
    answered directly for the others (a start that still chooses)."""
    from agentrl.examples.calculator import CalculatorEnv, correct_answer, tool_or_direct_expert

    lengths = []
    for seed in range(40):
        env = CalculatorEnv()
        env.reset(seed=seed)
        plan = tool_or_direct_expert(env)
        lengths.append(len(plan))
        if len(plan) == 2:  # a call, then the tool's value as the answer
            assert plan[0]["name"] == "calculate" and plan[1] == env.calculate(**plan[0]["arguments"])
        answer = [{"role": "assistant", "content": str(plan[-1])}]
        assert correct_answer([None], [answer], [env]) == [1.0]
    assert 12 <= lengths.count(1) <= 28 and set(lengths) == {1, 2}


GAME_2048 = {
    "factory": "agentrl.examples.game_2048:Game2048",
    "reward_funcs": ["agentrl.examples.game_2048:reward_score"],
    "prompt": "Play 2048 with the move tool.",
    "expert": "agentrl.examples.game_2048:expert",
    "success_reward": 16.0,
}


def move(direction: str) -> str:
    return json.dumps({"content": "", "tool_calls": [{"name": "move", "arguments": {"direction": direction}}]})


def test_2048_in_trl_shape_draws_its_tiles_from_the_episode_own_random():
    import random

    game = build(env_cfg(**GAME_2048))
    assert [s["function"]["name"] for s in game.tool_schemas] == ["move"]
    assert game.tool_schemas[0]["function"]["parameters"]["properties"]["direction"]["type"] == "string"
    boards = []
    before = random.getstate()
    for _ in range(2):  # the same task and moves: the same tiles fall
        env = game.make_env()
        env.reset(game.task("train", 7))
        boards.append([env.step(move(d)).observation.text for d in ("left", "up", "right", "down")])
    assert boards[0] == boards[1] and random.getstate() == before  # the process's own random is left as it was
    other = game.make_env()
    other.reset(game.task("train", 8))
    assert [other.step(move(d)).observation.text for d in ("left", "up", "right", "down")] != boards[0]


def test_2048_game_over_is_the_model_tool_message_and_the_episode_goes_on():
    game = build(env_cfg(**GAME_2048))
    env = game.make_env()
    env.reset(game.task("train", 0))
    env.instance.done = True  # the game ended on an earlier move
    step = env.step(move("left"))
    [message] = step.observation.messages
    assert not step.done and message["role"] == "tool" and message["name"] == "move"
    assert message["content"] == "Error: ValueError: Game over."  # TRL's {"error": str(e)}, with the error's type
    assert step.observation.counts == {"tool_calls": 1, "tool_errors": 1, "tool_errors/tool_raised": 1}
    assert env.step("My score is 0.").done  # the final answer still ends and scores it


def test_2048_expert_replays_its_moves_on_the_episode_tiles():
    """The expert plays a copy of the game on the episode's stream: its moves, replayed, earn its score."""
    from agentrl.rollout.demonstrations import ExpertPolicy

    game = build(env_cfg(**GAME_2048))
    tasks = [game.task("train", i) for i in range(6)]
    batch = collect(game, tasks, 1, ExpertPolicy(game), PromptSpec("generic", 0), keep_transcripts=True)
    for episode in batch.episodes:
        answer = episode.messages[-1]["content"]
        assert answer == f"Score: {episode.ret:g}" and episode.counts["tool_errors"] == 0
    assert sum(e.won for e in batch.episodes) >= 5  # a score of 16 in 7 greedy moves: 98% of 300 games measured


class KeyedScripted(Scripted):
    """`Scripted` with the keyed replies rollout.turns=ready asks for (each a function of its turn alone)."""

    def rollout_seed(self) -> int:
        return 0

    def act_keyed(self, turns, keys):
        return self.act(turns)


def test_ready_turns_play_the_route_in_worker_processes_with_lockstep_rows(suite, tokenizer):
    """rollout.turns=ready: each conversation's turn as soon as its environment (a worker process) answered; the
    rows, ids included, and the episodes' counts are lockstep's."""
    from agentrl.envs.workers import ProcessPool

    replies = [call("add", amount=1), call("wait", seconds=0.01), call("nope"), call("add", amount=1), "done"]
    tasks = [suite.task("train", i) for i in range(3)]
    spec = PromptSpec("generic", 0, tokenizer=tokenizer, max_prompt_tokens=4096)
    out = {}
    for turns in ("lockstep", "ready"):
        with ProcessPool(suite.make_env, 2, timeout_s=30, start_method="fork") as pool:
            policy = KeyedScripted(tokenizer, replies)
            out[turns] = collect(suite, tasks, 2, policy, spec, max_steps=6, pool=pool, turns=turns)
    lockstep, ready = out["lockstep"], out["ready"]
    assert (
        len(ready) == 30 and ready.prompt_ids == lockstep.prompt_ids and ready.completion_ids == lockstep.completion_ids
    )
    assert ready.reward == lockstep.reward and ready.valid == lockstep.valid
    assert [e.counts for e in ready.episodes] == [e.counts for e in lockstep.episodes]
    assert ready.episodes[0].counts == {"tool_calls": 4, "tool_errors": 1, "tool_errors/unknown_tool": 1}


# The estimators and their combinations on the route, through the CLI on the 2048 example (no extra needed): GiGPO
# with ARPO's replay and EPO's entropy term; RLOO with Dr. MAS's episode means and per-agent statistics
COMPOSED = {
    "gigpo-arpo-epo": ["+algo=gigpo", "algo.replay.enabled=true", "algo.entropy.mode=epo", "trainer.task_pool=2"],
    "rloo-drmas": [
        "algo.estimator=rloo",
        "algo.norm=none",
        "algo.episode_stats=episode_means",
        "algo.norm_scope=agent",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMPOSED))
def test_the_estimators_compose_on_the_route(name, run_cli, tmp_path):
    from tests.train.test_resume import GAME_2048

    run = tmp_path / "run"
    result = run_cli(
        "train",
        "+debug=fast",
        "logger=none",
        *GAME_2048,
        *COMPOSED[name],
        "trainer.iterations=3",
        "trainer.eval_every=0",
        f"hydra.run.dir={run}",
        env=ONE_THREAD,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "train/loss" in r]
    assert [r["iteration"] for r in trained] == [1, 2, 3]
    assert all(r["rollout/episode_length"] > 1 and r["rollout/advantage_abs_mean"] > 0 for r in trained)
    if name == "gigpo-arpo-epo":
        assert all("entropy/beta" in r and "replay/buffer_episodes" in r for r in trained)
        assert trained[-1]["replay/buffer_episodes"] > 0  # won 2048 episodes were kept for replay


def test_a_tool_that_kills_its_process_ends_that_episode_only(tokenizer):
    """A tool that takes its worker process down (os._exit) faults that episode; the others play on to their end."""
    from agentrl.envs.workers import ProcessPool

    crasher = build(env_cfg(factory="tests.envs.toy_tools:Crasher"))
    tasks = [crasher.task("train", i) for i in range(3)]
    targets = [2 + task.seed % 3 for task in tasks]  # Counter's target for the task
    assert 2 in targets and len(set(targets)) > 1
    replies = [call("crash"), call("add", amount=1), call("add", amount=1), "done"]
    spec = PromptSpec("generic", 0, tokenizer=tokenizer, max_prompt_tokens=4096)
    with ProcessPool(crasher.make_env, 3, timeout_s=30, start_method="fork") as pool:
        batch = collect(crasher, tasks, 1, Scripted(tokenizer, replies), spec, max_steps=6, pool=pool)
    for episode, target in zip(batch.episodes, targets):
        if target == 2:
            assert episode.fault is not None and "worker died" in episode.fault and not episode.won
        else:
            assert episode.fault is None and episode.length == 4, (episode.fault, episode.length)
