"""Training through TRL's colocated vLLM engine: weight sync, the behaviour log-probs of multi-turn rows,
TRL's vLLM/trainer importance-sampling correction in the loss, and what the asynchronous rollout worker does on the
engine (rollout.max_staleness >= 1): a job's snapshot loaded and the trainer's weights synced back after it, and rows
seeded one by one."""

from __future__ import annotations

import math

import torch

from agentrl.rollout.policies import SamplingSpec, chat_prompt_ids
from agentrl.rollout.vllm_policy import TrainerVLLMPolicy
from tests.with_vllm.conftest import NEEDS_VLLM

pytestmark = NEEDS_VLLM

# The engine computes in the trainer's precision (float32 on CPU); its kernels sum in another order, so per-token
# log-probs agree to a few 1e-6 (measured: 2e-6 before an update, 3e-6 after). One iteration at the fixture's
# learning rate moves them by far more than 10x this.
SYNC_TOLERANCE = 1e-4


def vllm_logps(trainer, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """The engine's log-probs of a fixed completion after a fixed prompt (prompt log-probs of the concatenation)."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    output = trainer.vllm_generation.llm.generate(
        [{"prompt_token_ids": prompt_ids + completion_ids}], sampling_params=params, use_tqdm=False
    )[0]
    positions = output.prompt_logprobs[len(prompt_ids) :]
    return [position[token].logprob for position, token in zip(positions, completion_ids)]


@torch.no_grad()
def trainer_logps(trainer, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    ids = torch.tensor([prompt_ids + completion_ids])
    logps, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, torch.ones_like(ids), len(completion_ids)
    )
    return logps[0].tolist()


def fixed_pair(trainer) -> tuple[list[int], list[int]]:
    tokenizer = trainer.processing_class
    suite = trainer.suite
    observation = suite.make_env().reset(suite.task("train", 0)).text
    prompt = chat_prompt_ids(tokenizer, observation, 2048)
    completion = tokenizer("<action>go to fridge 1</action>", add_special_tokens=False)["input_ids"]
    return prompt, completion + [tokenizer.eos_token_id]


def max_difference(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


def test_the_colocated_engine_is_built_as_rollout_vllm_says(vllm_trainer):
    """TRL takes neither the dtype nor enforce_eager; agentrl gives both to the engine TRL builds (vllm_engine.py)."""
    model_config = vllm_trainer.vllm_generation.llm.llm_engine.model_config
    assert model_config.enforce_eager is True  # the fixture's rollout.vllm.enforce_eager=true
    assert model_config.dtype == torch.float32  # hardware=cpu trains in fp32


def test_the_engine_holds_the_trainers_weights_after_an_update(vllm_trainer):
    trainer = vllm_trainer
    prompt, completion = fixed_pair(trainer)
    before = vllm_logps(trainer, prompt, completion)
    assert max_difference(before, trainer_logps(trainer, prompt, completion)) < SYNC_TOLERANCE

    trainer.model.train()
    trainer.training_step(trainer.model, None)  # a whole iteration: rollout through vLLM, then the updates
    assert trainer.iteration_metrics["train/optimizer_steps"] >= 1
    trainer.state.global_step += 1  # what TRL's loop does after the step; the next rollout syncs the weights
    policy = TrainerVLLMPolicy(trainer, SamplingSpec(max_new_tokens=4))
    policy._sync_weights_if_stale()

    after = vllm_logps(trainer, prompt, completion)
    assert max_difference(after, trainer_logps(trainer, prompt, completion)) < SYNC_TOLERANCE
    assert max_difference(after, before) > 10 * SYNC_TOLERANCE  # the update reached the engine


def test_multi_turn_rows_carry_vllms_behaviour_log_probs(vllm_trainer, monkeypatch):
    trainer = vllm_trainer
    generation = trainer.vllm_generation
    calls = []
    real_generate = generation.generate

    def counted(prompts, **kwargs):
        calls.append(len(prompts))
        return real_generate(prompts=prompts, **kwargs)

    monkeypatch.setattr(generation, "generate", counted)
    batch = trainer._rollout(trainer.sampler.next(2), 2)

    assert max(e.length for e in batch.episodes) >= 2, "the episodes run several turns"
    assert calls[0] == 4  # one batched generate per lockstep turn: 2 tasks x 2 episodes in the first
    assert len(calls) == max(e.length for e in batch.episodes)
    assert sum(calls) == len(batch)  # every row's reply came from vLLM
    for completion, logprobs in zip(batch.completion_ids, batch.logprobs):
        assert logprobs is not None and len(logprobs) == len(completion)
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in logprobs)
    # the behaviour log-probs are the engine's own: scored again by the engine, they agree
    for i in range(0, len(batch), max(1, len(batch) // 4)):
        again = vllm_logps(trainer, list(batch.prompt_ids[i]), list(batch.completion_ids[i]))
        assert max_difference(again, batch.logprobs[i]) < SYNC_TOLERANCE


def test_importance_sampling_keys_reach_the_loss(vllm_trainer):
    trainer = vllm_trainer
    trainer.state.global_step += 1  # weights may have changed in an earlier test: the rollout syncs them first
    out = trainer._generate_and_score_completions(None)
    mask = out["completion_mask"].bool()
    sampling, ratio = out["sampling_per_token_logps"], out["importance_sampling_ratio"]
    assert sampling[mask].lt(0).all(), "every completion token has vLLM's log-prob"
    # vLLM sampled with the weights the trainer holds: the sequence ratio is 1 up to kernel differences
    assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-3)

    mini = trainer._mini_batches(out)[0]
    mini["advantages"] = torch.linspace(-1.0, 1.0, mini["advantages"].numel())
    base = trainer._compute_loss(trainer.model, mini)
    mini["importance_sampling_ratio"] = mini["importance_sampling_ratio"] * 2.0
    doubled = trainer._compute_loss(trainer.model, mini)
    assert base.abs() > 0
    assert torch.allclose(doubled, 2.0 * base, rtol=1e-5, atol=1e-7)  # no KL in the tiny recipe: all of it scales


def test_a_jobs_snapshot_reaches_the_engine_and_the_trainers_weights_come_back(vllm_trainer):
    """The asynchronous rollout worker loads a job's snapshot (rollout.max_staleness >= 1); the trainer's own next
    generation on the engine syncs the trainer's weights again."""
    trainer = vllm_trainer
    prompt, completion = fixed_pair(trainer)
    policy = TrainerVLLMPolicy(trainer, SamplingSpec(max_new_tokens=4), engine_lock=trainer.vllm_engine_held())
    snapshot, at_snapshot = trainer.engine_weights(), trainer_logps(trainer, prompt, completion)
    saved = {name: tensor.clone() for name, tensor in trainer.model.state_dict().items()}
    noise = torch.Generator().manual_seed(0)
    try:
        with torch.no_grad():
            for parameter in trainer.model.parameters():
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=noise))
        moved = trainer_logps(trainer, prompt, completion)
        assert max_difference(moved, at_snapshot) > 10 * SYNC_TOLERANCE
        trainer.state.global_step += 1  # the trainer's weights changed: its next generation syncs them
        policy._sync_weights_if_stale()
        assert max_difference(vllm_logps(trainer, prompt, completion), moved) < SYNC_TOLERANCE

        with trainer.vllm_engine_held():
            trainer.load_engine_weights(trainer.vllm_generation.llm, snapshot)
        assert trainer._last_loaded_step is None  # the engine no longer holds the trainer's weights
        assert max_difference(vllm_logps(trainer, prompt, completion), at_snapshot) < SYNC_TOLERANCE

        policy._sync_weights_if_stale()
        assert max_difference(vllm_logps(trainer, prompt, completion), moved) < SYNC_TOLERANCE
    finally:
        trainer.model.load_state_dict(saved)
        trainer.state.global_step += 1  # the next test's generation syncs the weights put back


def test_seeded_rows_are_the_same_in_any_batch_and_order(vllm_trainer):
    """vLLM's per-request seed on this build: a row of the asynchronous worker's policy depends on its seed
    (the job's, its episode's and its turn's) and prompt only, not on the other rows of its call."""
    from agentrl.rollout.collector import Turn
    from agentrl.rollout.vllm_seeded import SeededVLLMPolicy, colocated_sampling

    trainer = vllm_trainer
    suite = trainer.suite
    sampling = colocated_sampling(trainer.vllm_generation, trainer.sampling_spec())

    def policy(seed):
        return SeededVLLMPolicy(trainer.vllm_generation.llm, trainer.processing_class, sampling, seed, None, 2048)

    observations = [suite.make_env().reset(suite.task("train", i)) for i in range(6)]
    turns = [Turn(prompt=o.text, observation=o, episode=i, step=i % 2) for i, o in enumerate(observations)]
    with trainer.vllm_engine_held():
        together = policy(7).act(turns)
        apart = policy(7).act(turns[4:][::-1]) + policy(7).act(turns[:4])
        other = policy(8).act(turns)
    as_rows = [(r.completion_ids, r.logprobs) for r in together]
    assert as_rows == [(r.completion_ids, r.logprobs) for r in [*apart[2:], apart[1], apart[0]]]
    assert all(r.logprobs and all(math.isfinite(lp) and lp <= 0 for lp in r.logprobs) for r in together)
    assert as_rows != [(r.completion_ids, r.logprobs) for r in other]
