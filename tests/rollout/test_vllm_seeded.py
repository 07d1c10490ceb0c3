"""The asynchronous rollout worker's vLLM policy without vLLM: each row's seed, and TRL's sampling settings.

The real engine (two runs of one seed, vLLM's log-probs on the rows) is exercised in tests/with_vllm."""

from __future__ import annotations

from types import SimpleNamespace

from agentrl.rollout.collector import PromptSpec, collect
from agentrl.rollout.policies import SamplingSpec
from agentrl.rollout.ready_turns import turn_key
from agentrl.rollout.vllm_seeded import SeededVLLMPolicy, colocated_sampling
from tests.rollout.test_vllm import ACTION, EOS, TOKENIZER, CountdownSuite

SEED = 12345


class SeedEchoLLM:
    """`vllm.LLM.generate` as the policy calls it: the action, EOS and junk, each token's log-prob naming the row's
    seed, so that a row shows which seed it was sampled with."""

    def __init__(self):
        self.calls: list[list[dict]] = []

    def generate(self, prompts, sampling_params, use_tqdm):
        assert len(sampling_params) == len(prompts) and use_tqdm is False
        self.calls.append(sampling_params)
        outputs = []
        for params in sampling_params:
            ids = ACTION + [EOS, 7]
            logprobs = [{token: SimpleNamespace(logprob=-float(params["seed"] % 997))} for token in ids]
            outputs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, logprobs=logprobs)]))
        return outputs


def test_each_row_samples_from_the_seed_of_its_job_episode_and_turn():
    llm, suite = SeedEchoLLM(), CountdownSuite()
    sampling = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 8, "logprobs": 0}
    policy = SeededVLLMPolicy(llm, TOKENIZER, sampling, SEED, [EOS], 2048, make_params=dict)
    batch = collect(suite, [suite.task("train", 2), suite.task("train", 3)], 2, policy, PromptSpec("compact", 2))

    assert [len(call) for call in llm.calls] == [4, 4, 2]  # one generate per lockstep turn, a request per episode
    assert all({k: params[k] for k in sampling} == sampling for call in llm.calls for params in call)
    seeds = [params["seed"] for call in llm.calls for params in call]
    assert len(set(seeds)) == len(seeds) == len(batch)
    for episode, step, completion, logprobs in zip(batch.episode, batch.step, batch.completion_ids, batch.logprobs):
        assert completion == ACTION + [EOS]  # cut at EOS
        assert logprobs == [-float(turn_key(SEED, episode, step) % 997)] * len(completion)
    assert sorted(seeds) == sorted(turn_key(SEED, e, s) for e, s in zip(batch.episode, batch.step))


def test_the_worker_samples_with_trls_colocated_settings_and_the_rollouts_own():
    generation = SimpleNamespace(
        repetition_penalty=1.1, top_k=5, min_p=None, logprobs=0, generation_kwargs={"frequency_penalty": 0.5}
    )
    kwargs = colocated_sampling(generation, SamplingSpec(temperature=0.7, top_p=0.9, max_new_tokens=12))
    assert kwargs == {
        "n": 1,
        "repetition_penalty": 1.1,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 5,
        "min_p": 0.0,
        "max_tokens": 12,
        "logprobs": 0,
        "frequency_penalty": 0.5,
    }
    greedy = colocated_sampling(generation, SamplingSpec(temperature=0.7, top_p=0.9, greedy=True))
    assert (greedy["temperature"], greedy["top_p"]) == (0.0, 1.0)  # greedy is temperature 0 in vLLM
