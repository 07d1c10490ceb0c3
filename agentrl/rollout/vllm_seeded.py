"""vLLM generation whose every row samples from a seed of its own: the asynchronous rollout worker's policy.

With `rollout.max_staleness >= 1` and `rollout.backend=vllm` the worker generates on TRL's colocated `vllm.LLM`,
in its own thread (agentrl/train/async_hooks.py). Its rows must not depend on when the job ran or on what else
samples in the process, so each request carries `SamplingParams(seed=...)`: vLLM then draws that row's tokens from
a generator of its own, seeded with `turn_key(seed, episode, step)` (the job's seed, the row's episode and turn).
The sampling settings are those TRL's colocated `VLLMGeneration.generate` passes, with the rollout's temperature,
top-p and length applied as `TrainerVLLMPolicy` applies them, so the worker samples what the synchronous loop would.

vLLM's CPU sampler still draws one noise tensor from torch's global stream per step (and overwrites the rows that
have their own generator): the rows do not depend on that stream, but the stream moves (docs/architecture.md,
"Asynchronous rollouts").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl.rollout.collector import Reply, Turn
from agentrl.rollout.policies import SamplingSpec, turns_prompt_ids
from agentrl.rollout.ready_turns import turn_key
from agentrl.rollout.vllm_policy import _eos_ids, reply_of_output


def colocated_sampling(generation: Any, sampling: SamplingSpec) -> dict[str, Any]:
    """The keyword arguments of the `SamplingParams` TRL's colocated generate builds (TRL 1.16,
    `VLLMGeneration.generate`), with `sampling` in place of TRL's temperature, top-p and length."""
    kwargs = {
        "n": 1,
        "repetition_penalty": generation.repetition_penalty,
        "temperature": 0.0 if sampling.greedy else sampling.temperature,
        "top_p": 1.0 if sampling.greedy else sampling.top_p,
        "top_k": generation.top_k,
        "min_p": 0.0 if generation.min_p is None else generation.min_p,
        "max_tokens": sampling.max_new_tokens,
        "logprobs": generation.logprobs,  # 0: the sampled token's log-prob alone
    }
    kwargs.update(generation.generation_kwargs or {})
    return kwargs


class SeededVLLMPolicy:
    """One `llm.generate` per turn for every active episode; the row of episode e at turn t samples from
    `turn_key(seed, e, t)`. Replies carry vLLM's log-probs of the sampled tokens (its processed log-probs, as TRL
    asks for when it builds the engine)."""

    def __init__(
        self,
        llm,
        tokenizer,
        sampling: dict[str, Any],
        seed: int,
        eos_token_ids: list[int] | None,
        max_prompt_tokens: int,
        make_params: Callable[..., Any] | None = None,
    ):
        if make_params is None:
            from vllm import SamplingParams as make_params
        self.llm, self.tokenizer, self.sampling, self.seed = llm, tokenizer, dict(sampling), int(seed)
        self.eos_token_ids = _eos_ids(tokenizer, eos_token_ids)
        self.max_prompt_tokens, self.make_params = max_prompt_tokens, make_params

    def row_seed(self, turn: Turn) -> int:
        return turn_key(self.seed, turn.episode, turn.step)

    def act(self, turns: list[Turn]) -> list[Reply]:
        if not turns:
            return []
        prompts = turns_prompt_ids(self.tokenizer, turns, self.max_prompt_tokens)
        params = [self.make_params(**self.sampling, seed=self.row_seed(turn)) for turn in turns]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sampling_params=params, use_tqdm=False)
        return [reply_of_output(self.tokenizer, p, output, self.eos_token_ids) for p, output in zip(prompts, outputs)]
