"""Turns without lockstep (rollout.turns=ready, agentrl/rollout/ready_turns.py): each episode's turn is generated
as soon as its environment has answered, and the rows do not depend on the timing.

The finding the mode rests on (2-core AMD EPYC with AVX-512, torch 2.13, fp32, tiny Qwen2 models): HF generation
gives a row other log-probs, in the last bits, in another batch. Alone against in batches of 2 to 16 at a fixed width:
167 of 238 placements differed (the matrix product takes rows 4 at a time and the rest another way); with the
batch padded to a multiple of 2, 158 of 224; of 4, 0 of 238 (0 of 451 in batches of 2 to 64). With the width of the
batch's longest prompt instead of a fixed one, 6 of 451 still differed; with SDPA, a row's values also changed with
its place in a batch of fixed shape. Eager attention, a width of the row's own (`KEYED_WIDTH`) and batches of a
multiple of 4 rows (`KEYED_ROWS`) are what `HFPolicy.act_keyed` uses; `test_a_row_is_the_same_alone_and_in_any_batch`
checks it on the machine that runs it."""

from __future__ import annotations

import hashlib
import random
import time
from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agentrl.config.run import RolloutConfig
from agentrl.config.staleness import check_turns
from agentrl.cpu import batch_invariant_blas
from agentrl.envs.base import Observation, Step, Task
from agentrl.envs.household import HouseholdEnv, HouseholdSuite
from agentrl.envs.latency import SlowEnv
from agentrl.envs.workers import EnvFault, InlinePool, ProcessPool
from agentrl.errors import UserError
from agentrl.models.tiny import build_tokenizer
from agentrl.rollout import ready_turns
from agentrl.rollout.collector import PromptSpec, Reply, RolloutAbandoned, Turn, collect
from agentrl.rollout.parsing import format_reply
from agentrl.rollout.policies import HFPolicy, SamplingSpec

SUITE = HouseholdSuite("easy")
PROMPT = PromptSpec("compact", 2)


class TurnPolicy:
    """Replies that depend on the turn's prompt alone (a hash of it picks an admissible action); records each call's
    (episode, step) keys, in call order, through the prompts' step numbers and a map the test fills."""

    def __init__(self):
        self.calls: list[list[tuple[str, int]]] = []

    def act(self, turns: list[Turn]) -> list[Reply]:
        self.calls.append([(t.task.task_id, t.step) for t in turns])
        replies = []
        for t in turns:
            actions = t.observation.admissible_actions
            pick = int(hashlib.sha256(t.prompt.encode()).hexdigest(), 16) % len(actions)
            replies.append(Reply(text=format_reply(actions[pick], t.reply_format)))
        return replies

    def rollout_seed(self) -> int:
        return 0

    def act_keyed(self, turns: list[Turn], keys: list[int]) -> list[Reply]:
        return self.act(turns)


class TimedEnv:
    """A household environment whose steps sleep: a seeded random few ms each, and `slow_s` more on the tasks
    named in `slow`; `fail` names a task whose second step raises, `hang` one whose first step sleeps 30 s."""

    def __init__(self, jitter_s=0.0, slow=(), slow_s=0.0, fail=None, hang=None, seed=0):
        self.inner, self.rng = HouseholdEnv(50), random.Random(seed)
        self.jitter_s, self.slow, self.slow_s, self.fail, self.hang = jitter_s, slow, slow_s, fail, hang
        self.task, self.steps = None, 0

    def reset(self, task: Task) -> Observation:
        self.task, self.steps = task, 0
        return self.inner.reset(task)

    def step(self, action: str) -> Step:
        self.steps += 1
        time.sleep(self.rng.uniform(0, self.jitter_s) + (self.slow_s if self.task.task_id in self.slow else 0.0))
        if self.task.task_id == self.fail and self.steps == 2:
            raise ValueError("broken on purpose")
        if self.task.task_id == self.hang:
            time.sleep(30)
        return self.inner.step(action)

    def close(self) -> None:
        self.inner.close()


_BUILT = [0]


def timed_env(**kw) -> TimedEnv:
    _BUILT[0] += 1
    return TimedEnv(seed=f"{kw.pop('seed', 0)}-{time.time_ns()}-{_BUILT[0]}", **kw)


def pool_of(workers: int, timeout_s: float = 60.0, **kw) -> ProcessPool:
    import functools

    return ProcessPool(functools.partial(timed_env, **kw), workers, timeout_s=timeout_s, start_method="fork")


def tasks(n: int) -> list[Task]:
    return [SUITE.task("train", i) for i in range(n)]


def same_rows(a, b) -> None:
    for column in a.ROW_COLUMNS:
        assert getattr(a, column) == getattr(b, column), column
    assert [(e.episode, e.won, e.ret, e.length, e.fault) for e in a.episodes] == [
        (e.episode, e.won, e.ret, e.length, e.fault) for e in b.episodes
    ]


# ---------------------------------------------------------------- rows as lockstep's, where the replies allow


def test_rows_turns_and_asks_are_lockstep_s_with_replies_that_depend_on_the_turn_alone():
    out = {}
    for turns in ("lockstep", "ready"):
        progress, asked = [], []

        def ask(going, asked=asked):
            asked.append(going)
            return going, False

        out[turns] = collect(
            SUITE, tasks(3), 2, TurnPolicy(), PROMPT, max_steps=4, on_turn=lambda t, n, p=progress: p.append((t, n)),
            lockstep=ask, turns=turns,
        ), progress, asked  # fmt: skip
    (lock, lock_progress, lock_asked), (ready, ready_progress, ready_asked) = out["lockstep"], out["ready"]
    same_rows(lock, ready)
    assert max(lock.step) == 3 and lock_progress == ready_progress == [(t, 4) for t in range(1, 5)]
    assert lock_asked == ready_asked


def test_a_policy_without_keyed_replies_is_refused_in_one_line():
    class Plain:
        def act(self, turns):
            return [Reply(text="x") for _ in turns]

    with pytest.raises(UserError, match="rollout.turns=ready needs a policy"):
        collect(SUITE, tasks(1), 1, Plain(), PROMPT, turns="ready")
    with pytest.raises(ValueError, match="turns must be one of"):
        collect(SUITE, tasks(1), 1, Plain(), PROMPT, turns="sometimes")


# ---------------------------------------------------------------- timing: nobody waits, the rows do not move


def test_one_slow_episode_does_not_hold_back_the_others():
    policy, slow = TurnPolicy(), tasks(2)[0].task_id
    with pool_of(2, slow=(slow,), slow_s=0.4) as pool:  # slot 0 (slow) in worker 0, slot 1 in worker 1
        collect(SUITE, tasks(2), 1, policy, PROMPT, max_steps=3, pool=pool, turns="ready")
    order = [key for call in policy.calls for key in call]
    fast_done = max(i for i, (task, _) in enumerate(order) if task != slow)
    slow_second = order.index((slow, 1))
    assert [step for task, step in order if task != slow] == [0, 1, 2]
    assert fast_done < slow_second  # every turn of the fast episode came before the slow one's second


def test_rows_are_the_same_under_random_step_latencies(monkeypatch):
    """A tiny model's sampled rows, with steps that take a random few ms (and 0.1 s more for two episodes) in two
    worker processes, twice, and with instant steps in process: the same ids and log-probs, though the generation
    batches were not the same (each generation takes the answers there are, without waiting for more)."""
    tokenizer = build_tokenizer(["<action>go to fridge 1</action> You arrive at countertop 1."] * 50, vocab_size=300)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        attn_implementation="eager",
    )  # fmt: skip
    model = Qwen2ForCausalLM(config).eval()
    batches = []

    class Recorded(HFPolicy):
        def act_keyed(self, turns, keys):
            batches.append(sorted(keys))
            return super().act_keyed(turns, keys)

    def run(pool):
        policy = Recorded(model, tokenizer, SamplingSpec(temperature=1.0, max_new_tokens=6))
        policy.generator = torch.Generator().manual_seed(7)
        start = len(batches)
        batch = collect(SUITE, tasks(3), 2, policy, PROMPT, max_steps=4, pool=pool, turns="ready")
        return batch, batches[start:]

    instant, instant_batches = run(InlinePool(SUITE.make_env))
    monkeypatch.setattr(ready_turns, "LINGER_SHARE", 0.0)  # no waiting for more answers: batches as they come
    with pool_of(2, jitter_s=0.01, slow=(tasks(1)[0].task_id,), slow_s=0.1) as pool:  # a group of two slower ones
        first, first_batches = run(pool)
        second, second_batches = run(pool)
    same_rows(instant, first)
    same_rows(instant, second)
    assert all(lp is not None and len(lp) == len(ids) for lp, ids in zip(first.logprobs, first.completion_ids))
    assert first_batches != instant_batches or second_batches != instant_batches


def test_a_row_is_the_same_alone_and_in_any_batch():
    """The measurement behind the mode: `act_keyed`'s rows, alone and in batches of 2 to 9 at every place."""
    assert batch_invariant_blas() is None  # MKL's strict mode, asked for by the session (tests/conftest.py)
    tokenizer = build_tokenizer(["<action>go to fridge 1</action> You arrive at countertop 1."] * 50, vocab_size=300)
    torch.manual_seed(1)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, attn_implementation="eager",
    )  # fmt: skip
    policy = HFPolicy(Qwen2ForCausalLM(config).eval(), tokenizer, SamplingSpec(temperature=1.0, max_new_tokens=8))
    env = HouseholdEnv(50)
    observations = [env.reset(task) for task in tasks(9)]
    turns = [Turn(prompt=o.text * (1 + i % 3), observation=o) for i, o in enumerate(observations)]
    alone = [policy.act_keyed([turn], [100 + i])[0] for i, turn in enumerate(turns)]
    rng = random.Random(0)
    for size in range(2, 10):
        chosen = rng.sample(range(len(turns)), size)
        for i, reply in zip(chosen, policy.act_keyed([turns[i] for i in chosen], [100 + i for i in chosen])):
            assert reply.completion_ids == alone[i].completion_ids and reply.logprobs == alone[i].logprobs
    config._attn_implementation = "sdpa"
    sdpa = HFPolicy(Qwen2ForCausalLM(config), tokenizer, SamplingSpec())
    with pytest.raises(UserError, match="model.attn_implementation=eager"):
        sdpa.act_keyed(turns[:1], [0])


# ---------------------------------------------------------------- faults, timeouts, stops


def test_a_fault_ends_its_episode_only_and_the_rows_are_lockstep_s():
    fail = tasks(4)[1].task_id
    out = {}
    for turns in ("lockstep", "ready"):
        with pool_of(2, fail=fail, jitter_s=0.005) as pool:
            out[turns] = collect(SUITE, tasks(4), 1, TurnPolicy(), PROMPT, max_steps=4, pool=pool, turns=turns)
            assert pool.faults == 1
    same_rows(out["lockstep"], out["ready"])
    faults = {e.task_id: e.fault for e in out["ready"].episodes}
    assert faults.pop(fail).startswith("step: ValueError: broken on purpose")
    assert set(faults.values()) == {None}


def test_each_episode_is_handed_on_once_as_it_ends():
    """`on_episode_end` (what `agentrl eval` writes out as it goes) gets every episode once, faulted ones too, with the
    result the batch ends with; lockstep hands them on turn by turn."""
    fail = tasks(4)[1].task_id
    for turns in ("lockstep", "ready"):
        ended = []
        with pool_of(2, fail=fail, jitter_s=0.005) as pool:
            batch = collect(
                SUITE, tasks(4), 2, TurnPolicy(), PROMPT, max_steps=4, pool=pool, turns=turns,
                on_episode_end=ended.append,
            )  # fmt: skip
        outcome = [(e.episode, e.won, e.ret, e.length, e.fault) for e in ended]
        assert sorted(outcome) == [(e.episode, e.won, e.ret, e.length, e.fault) for e in batch.episodes], turns
        assert sum(e.fault is not None for e in ended) == 2
        if turns == "lockstep":
            assert [e.length for e in ended] == sorted(e.length for e in ended)


def test_a_hanging_step_times_out_and_the_other_worker_s_episodes_play_on():
    hang = tasks(4)[0].task_id  # slot 0, in worker 0 with slot 2; slots 1 and 3 in worker 1
    with pool_of(2, timeout_s=0.5, hang=hang) as pool:
        batch = collect(SUITE, tasks(4), 1, TurnPolicy(), PROMPT, max_steps=3, pool=pool, turns="ready")
        assert pool.restarts == 1
        again = collect(SUITE, tasks(4)[1:], 1, TurnPolicy(), PROMPT, max_steps=2, pool=pool, turns="ready")
    by_episode = {e.episode: e for e in batch.episodes}
    assert by_episode[0].fault.startswith("step: timeout after 0.5 s")
    assert by_episode[2].fault is not None  # its worker was replaced: its environment went with it
    assert by_episode[1].fault is None and by_episode[3].fault is None
    assert [e.fault for e in again.episodes] == [None, None, None]


def test_a_stop_abandons_the_rollout_and_leaves_the_pool_usable():
    calls = []

    def stop_at_third(going):
        calls.append(going)
        return going, len(calls) == 3

    with pool_of(2, jitter_s=0.01) as pool:
        with pytest.raises(RolloutAbandoned, match="turn 2"):
            collect(SUITE, tasks(4), 1, TurnPolicy(), PROMPT, max_steps=6, pool=pool, lockstep=stop_at_third,
                    turns="ready")  # fmt: skip
        assert pool.in_flight == 0
        batch = collect(SUITE, tasks(4), 1, TurnPolicy(), PROMPT, max_steps=2, pool=pool, turns="ready")
    assert len(batch) >= 4 and all(e.fault is None for e in batch.episodes)


# ---------------------------------------------------------------- the pools' submit and take


@pytest.mark.parametrize("kind", ["inline", "process"])
def test_submit_and_take_give_each_step_once(kind):
    pool = InlinePool(lambda: TimedEnv()) if kind == "inline" else pool_of(2)
    with pool:
        first = pool.reset([(s, t) for s, t in enumerate(tasks(3))])
        pool.submit([(s, obs.admissible_actions[0]) for s, obs in enumerate(first)])
        with pytest.raises(ValueError, match="in flight"):
            pool.submit([(0, "look")])
        with pytest.raises(RuntimeError, match="in flight"):
            pool.step([(0, "look")])
        taken = []
        while pool.in_flight:
            taken += pool.take()
        assert sorted(slot for slot, _ in taken) == [0, 1, 2] and all(isinstance(r, Step) for _, r in taken)
        assert pool.take(timeout=0) == []


def test_a_step_of_a_lost_slot_is_a_fault_at_take():
    with pool_of(2, hang="household/easy/train/0") as pool:
        pool.timeout_s = 0.3
        first = pool.reset([(s, t) for s, t in enumerate(tasks(3))])
        pool.submit([(0, first[0].admissible_actions[0])])
        (slot, result), *_ = pool.take()
        assert slot == 0 and isinstance(result, EnvFault) and "timeout" in result.message
        pool.submit([(2, first[2].admissible_actions[0]), (1, first[1].admissible_actions[0])])  # 2 went with worker 0
        results = dict(pool.take() + (pool.take() if pool.in_flight else []))
        assert isinstance(results[2], EnvFault) and isinstance(results[1], Step)


# ---------------------------------------------------------------- the key and its refusals


def test_the_key_defaults_to_lockstep_and_ready_is_refused_where_it_cannot_hold():
    assert RolloutConfig().turns == "lockstep"

    def cfg(num_workers=2, attention="eager", **rollout):
        r = {"turns": "ready", "backend": "hf", "generate_in_bf16": False, **rollout}
        return SimpleNamespace(
            rollout=SimpleNamespace(**r), env=SimpleNamespace(num_workers=num_workers), trainer=SimpleNamespace(),
            hardware=SimpleNamespace(num_processes=1, device="cpu", precision="fp32"),
            model=SimpleNamespace(attn_implementation=attention),
        )  # fmt: skip

    check_turns(cfg())
    check_turns(cfg(num_workers=0, turns="lockstep"))
    for bad, words in [
        (cfg(num_workers=0), "env.num_workers=2"),
        (cfg(attention=None), "model.attn_implementation=eager"),
        (cfg(backend="vllm"), "rollout.backend=hf"),
        (cfg(generate_in_bf16=True), "fp32"),
    ]:
        with pytest.raises(UserError, match=words) as err:
            check_turns(bad)
        assert "\n" not in str(err.value) and str(err.value).endswith("or rollout.turns=lockstep")


def test_slow_env_spread_makes_one_step_in_eight_slower():
    env = SlowEnv(HouseholdEnv(50), 0.01, spread=3.0, slow_every=8, per="step", seed=5)
    waits = [env.step_latency() for _ in range(800)]
    assert set(waits) == {0.01, 0.04} and 60 < waits.count(0.04) < 140
    env = SlowEnv(HouseholdEnv(50), 0.01, spread=3.0, per="episode", seed=5)
    per_episode = []
    for _ in range(200):
        env.reset(tasks(1)[0])
        per_episode.append({env.step_latency() for _ in range(3)})
    assert all(len(w) == 1 for w in per_episode) and {0.04} in per_episode and {0.01} in per_episode
