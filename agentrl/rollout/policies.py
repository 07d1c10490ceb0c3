"""Policies the collector can call: a language model through HF `generate`, or a baseline.

`HFPolicy` is the CPU path (and the default on one GPU): one batched, left-padded
`generate` call per turn for every active episode. It returns token ids and the
behaviour log-probs of the sampled tokens.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from agentrl.rollout.collector import Reply, Turn
from agentrl.rollout.parsing import format_reply


@dataclass
class SamplingSpec:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    max_prompt_tokens: int = 2048
    greedy: bool = False


def chat_prompt_ids(tokenizer, prompt: str, max_tokens: int) -> list[int]:
    """Token ids of one user turn in the model's chat format, ready for the assistant's reply.

    Over-long prompts keep their end, where the current observation and the admissible actions are.
    """
    return chat_prompts_ids(tokenizer, [prompt], max_tokens)[0]


def chat_prompts_ids(tokenizer, prompts: Sequence[str], max_tokens: int) -> list[list[int]]:
    """`chat_prompt_ids` of each prompt, with one call of the chat template and one of the tokenizer for them all:
    the same ids in half the time of one call each for a lockstep turn's prompts (the tiny default: 112 against
    210 ms an iteration)."""
    if not prompts:
        return []
    texts = tokenizer.apply_chat_template(
        [[{"role": "user", "content": prompt}] for prompt in prompts], tokenize=False, add_generation_prompt=True
    )
    return [ids[-max_tokens:] for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


class HFPolicy:
    """Samples replies from a causal LM with `model.generate`."""

    def __init__(
        self,
        model,
        tokenizer,
        sampling: SamplingSpec,
        eos_token_ids: list[int] | None = None,
        interrupt: Callable[[], bool] | None = None,
    ):
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        # a stop during a long generation ends it at the next token (the collector then drops the rollout)
        self.interrupt = interrupt
        eos = eos_token_ids or [tokenizer.eos_token_id]
        self.eos_token_ids = [e for e in eos if e is not None]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]

    @torch.no_grad()
    def act(self, turns: list[Turn]) -> list[Reply]:
        if not turns:
            return []
        s = self.sampling
        prompts = chat_prompts_ids(self.tokenizer, [t.prompt for t in turns], s.max_prompt_tokens)
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: generation continues from the right edge
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p) :] = 1
        was_training = self.model.training
        self.model.eval()
        out = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            do_sample=not s.greedy,
            temperature=None if s.greedy else s.temperature,
            top_p=None if s.greedy else s.top_p,
            top_k=None,
            repetition_penalty=1.0,  # a downloaded Qwen2.5-Instruct's generation_config.json asks for 1.1
            max_new_tokens=s.max_new_tokens,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_id,
            output_scores=True,
            return_dict_in_generate=True,
            stopping_criteria=_when(self.interrupt),
        )
        if was_training:
            self.model.train()
        sampled = out.sequences[:, width:]
        token_logprobs = _sampled_logprobs(out.scores, sampled) if out.scores else None
        sequences = sampled.cpu()
        replies = []
        for i, prompt_ids in enumerate(prompts):
            completion = _cut_at_eos(sequences[i].tolist(), self.eos_token_ids)
            logprobs = token_logprobs[i, : len(completion)].tolist() if token_logprobs is not None else None
            text = self.tokenizer.decode(completion, skip_special_tokens=True)
            replies.append(Reply(text=text, prompt_ids=prompt_ids, completion_ids=completion, logprobs=logprobs))
        return replies


def _when(interrupt: Callable[[], bool] | None):
    """HF stopping criteria that end every sequence once `interrupt()` is true (None without one)."""
    if interrupt is None:
        return None
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Interrupted(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), interrupt(), dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([Interrupted()])


def _sampled_logprobs(scores, sampled) -> torch.Tensor:
    """(B, T) behaviour log-probs of the sampled tokens under the (temperature-scaled) sampling distribution.

    One step at a time, so that no (B, T, vocabulary) tensor is built: with a 150k vocabulary that
    would be gigabytes per turn.
    """
    steps = [
        step.float().log_softmax(-1).gather(-1, sampled[:, t : t + 1]).squeeze(-1) for t, step in enumerate(scores)
    ]
    return torch.stack(steps, dim=1).cpu()


def _cut_at_eos(ids: list[int], eos_ids: list[int]) -> list[int]:
    """Keep the completion up to and including its first end token (the model must learn to stop)."""
    for pos, tok in enumerate(ids):
        if tok in eos_ids:
            return ids[: pos + 1]
    return ids


class RandomPolicy:
    """A uniformly random admissible action, well formed: the baseline every run should beat."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    @classmethod
    def for_suite(cls, suite, seed: int = 0) -> RandomPolicy:
        """The random policy of a suite's environments; UserError in one line where none can play them (a suite's
        optional `random_policy_problem`: an environment that lists no actions and samples none)."""
        from agentrl.errors import UserError

        if problem := getattr(suite, "random_policy_problem", None):
            raise UserError(problem)
        return cls(seed)

    def act(self, turns: list[Turn]) -> list[Reply]:
        replies = []
        for t in turns:
            actions = t.observation.admissible_actions
            action = self.rng.choice(actions) if actions else "look"
            replies.append(Reply(text=format_reply(action, t.reply_format)))
        return replies
