"""Policies the collector can call: a language model through HF `generate`, or a baseline.

`HFPolicy` is the CPU path (and the default on one GPU): one batched, left-padded
`generate` call per turn for every active episode. It returns token ids and the
behaviour log-probs of the sampled tokens.

`act_keyed` (rollout.turns=ready, agentrl/rollout/ready_turns.py) gives each reply independently of the other
prompts of its call. Measured on a 2-core AMD EPYC in fp32 (tests/rollout/test_ready_turns.py): a row's ids and
log-probs change in the last bits with its left-padded width, with the batch's size (the CPU's matrix product
takes rows in blocks of 4 and the rest another way: a lone row, or the last 1 to 3 of a small batch, come out
otherwise) and, with SDPA, with its place in the batch. With eager attention, a fixed width and a batch of a
multiple of 4 rows, they are the same to the bit in any batch at any place. So each prompt is padded to its length
rounded up to `KEYED_WIDTH` tokens (one `generate` call per width), the call to a multiple of `KEYED_ROWS` rows
(copies of its first row, which generate what it does), and each row samples from a `torch.Generator` of its own,
seeded by its key.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from agentrl.cpu import KEYED_ROWS
from agentrl.rollout.collector import Reply, Turn
from agentrl.rollout.parsing import format_reply
from agentrl.rollout.prompts import CHARS_PER_TOKEN_BOUND, prompt_tail

# act_keyed pads each prompt to a multiple of this many tokens: its row's width depends on itself alone (one call per
# width: coarse, so that a turn's prompts mostly share one)
KEYED_WIDTH = 256
# and each call to a multiple of KEYED_ROWS rows (agentrl/cpu.py): every row goes through the same path of the matrix
# products
# a tail of a long prompt must give this many ids more than chat_prompts_ids keeps (its first ones may differ)
RESYNC_TOKENS = 64
# prompts tokenised in one call (_templated_ids)
TOKENIZE_CHUNK = 256


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
    210 ms an iteration). Only each prompt's tail is tokenised (CHARS_PER_TOKEN_BOUND), so a prompt of any length
    costs what the budget does."""
    if not prompts:
        return []
    tails = [prompt_tail(prompt, max_tokens * CHARS_PER_TOKEN_BOUND) for prompt in prompts]
    ids = _templated_ids(tokenizer, tails)
    # A tail has the whole prompt's last ids where it gives RESYNC_TOKENS more than are kept: only the chat template's
    # opening and the tail's first word can differ. One that gave fewer compresses better than the bound: that prompt
    # is tokenised whole (tests/rollout/test_prompt_budget.py).
    short = [
        i
        for i, (tail, row) in enumerate(zip(tails, ids))
        if tail is not prompts[i] and len(row) < max_tokens + RESYNC_TOKENS
    ]
    for i, row in zip(short, _templated_ids(tokenizer, [prompts[i] for i in short])):
        ids[i] = row
    return [row[-max_tokens:] for row in ids]


def _templated_ids(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids of each prompt as one user turn in the chat template, with the generation prompt; TOKENIZE_CHUNK
    prompts a call, so that the tokeniser's own record of each text (its tokens and offsets) is held for one chunk,
    not for a warm-up's thousands of prompts at once."""
    ids: list[list[int]] = []
    for start in range(0, len(prompts), TOKENIZE_CHUNK):
        texts = tokenizer.apply_chat_template(
            [[{"role": "user", "content": prompt}] for prompt in prompts[start : start + TOKENIZE_CHUNK]],
            tokenize=False,
            add_generation_prompt=True,
        )
        ids.extend(tokenizer(texts, add_special_tokens=False)["input_ids"])
    return ids


def turns_prompt_ids(tokenizer, turns: Sequence[Turn], max_tokens: int) -> list[list[int]]:
    """The prompt ids of each turn: the ids its dialect wrote where it wrote them (the tool route's conversation,
    never cut), else `chat_prompts_ids` of its text, in one call for them all."""
    texts = [i for i, t in enumerate(turns) if t.prompt_ids is None]
    wrapped = iter(chat_prompts_ids(tokenizer, [turns[i].prompt for i in texts], max_tokens))
    return [list(t.prompt_ids) if t.prompt_ids is not None else next(wrapped) for t in turns]


class HFPolicy:
    """Samples replies from a causal LM with `model.generate`."""

    def __init__(
        self,
        model,
        tokenizer,
        sampling: SamplingSpec,
        eos_token_ids: list[int] | None = None,
        interrupt: Callable[[], bool] | None = None,
        generator: torch.Generator | None = None,
    ):
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        # sampling from this generator, not torch's global stream (an asynchronous rollout worker's own stream)
        self.generator = generator
        # a stop during a long generation ends it at the next token (the collector then drops the rollout)
        self.interrupt = interrupt
        eos = eos_token_ids or [tokenizer.eos_token_id]
        self.eos_token_ids = [e for e in eos if e is not None]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]

    def rollout_seed(self) -> int:
        """A seed for one rollout's per-turn streams (`act_keyed`), drawn from the policy's stream."""
        return int(torch.randint(0, 2**62, (1,), generator=self.generator))

    @torch.no_grad()
    def act_keyed(self, turns: list[Turn], keys: list[int]) -> list[Reply]:
        """`act`'s replies, each the same whichever other turns share the call (the module docstring): the row
        of `turns[i]` samples from a generator seeded with `keys[i]`. Needs eager attention."""
        kernel = getattr(getattr(self.model, "config", None), "_attn_implementation", None)
        if kernel != "eager":
            from agentrl.errors import UserError

            raise UserError(
                f"rollout.turns=ready generates each row independently of its batch with eager attention only; "
                f"the model's is {kernel}: set model.attn_implementation=eager"
            )
        if not turns:
            return []
        s = self.sampling
        prompts = turns_prompt_ids(self.tokenizer, turns, s.max_prompt_tokens)
        device = next(self.model.parameters()).device
        by_width: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_width.setdefault(-(-max(len(p), 1) // KEYED_WIDTH) * KEYED_WIDTH, []).append(i)
        replies: list[Reply | None] = [None] * len(turns)
        for width, rows in sorted(by_width.items()):
            padded = rows + [rows[0]] * (-len(rows) % KEYED_ROWS)
            generators = [torch.Generator(device=device).manual_seed(keys[i]) for i in padded]
            for i, reply in zip(rows, self._generate([prompts[i] for i in padded], width, device, generators)):
                replies[i] = reply
        return replies

    @torch.no_grad()
    def act(self, turns: list[Turn]) -> list[Reply]:
        if not turns:
            return []
        s = self.sampling
        prompts = turns_prompt_ids(self.tokenizer, turns, s.max_prompt_tokens)
        device = next(self.model.parameters()).device
        return self._generate(prompts, max(len(p) for p in prompts), device)

    def _generate(
        self, prompts: list[list[int]], width: int, device, generators: list[torch.Generator] | None = None
    ) -> list[Reply]:
        s = self.sampling
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: generation continues from the right edge
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p) :] = 1
        was_training = self.model.training
        self.model.eval()
        sampled, token_logprobs = generate_with_logprobs(
            self.model,
            input_ids.to(device),
            attention.to(device),
            s,
            eos_token_ids=self.eos_token_ids,
            pad_token_id=self.pad_id,
            interrupt=self.interrupt,
            generator=self.generator,
            generators=generators,
        )
        if was_training:
            self.model.train()
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


def generate_with_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    s: SamplingSpec,
    eos_token_ids: list[int],
    pad_token_id: int,
    interrupt: Callable[[], bool] | None = None,
    generator: torch.Generator | None = None,
    generators: list[torch.Generator] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, T) generated ids after the prompt, and (B, T) fp32 behaviour log-probs on the CPU of each under the
    distribution it was sampled from (None when nothing was generated). Positions after a sequence's end token hold
    the padding and its log-prob, as `generate` pads them.

    Without `output_scores`, which would keep a fp32 row of the vocabulary per generated token and sequence to the
    end of the call (128 sequences x 512 tokens x 151,936: 37 GiB), `_SampledLogprobs` takes each step's log-prob as
    the step goes. transformers puts custom logits processors before its sampling warpers (temperature, top-p:
    `_get_logits_processor`), so this call builds those warpers itself, in transformers' order, ahead of the
    recorder, and turns off the warpers a model's generation_config.json could add after it: the sampling is what
    `SamplingSpec` says, and the recorder sees the scores `generate` samples from, the same tensor `output_scores`
    kept.

    With a `generator`, the next token is drawn from that generator (`_DrawFrom`, after the recorder) and `generate`
    runs greedy on the one token left: the same distribution, a stream of its own that another thread's sampling
    (an evaluation beside an asynchronous rollout) cannot advance, and torch's global stream untouched. With
    `generators`, one per row (`_DrawEach`, in place of `generator`), row i's tokens are drawn from its own: its
    draws do not depend on the other rows of the call.
    """
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    warpers = []
    if not s.greedy and s.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(s.temperature))
    if not s.greedy and s.top_p < 1.0:
        warpers.append(TopPLogitsWarper(s.top_p))
    recorder = _SampledLogprobs()
    draw = [_DrawFrom(generator)] if generator is not None and not s.greedy else []
    if generators is not None and not s.greedy:
        draw = [_DrawEach(generators)]
    sequences = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        do_sample=not s.greedy and not draw,
        logits_processor=LogitsProcessorList([*warpers, recorder, *draw]),
        # generate's own warpers, and what runs after custom processors, all off: the warpers above replace
        # temperature and top_p, and any later one would change the distribution after the recorder saw it
        temperature=None,
        top_p=None,
        top_k=None,
        min_p=None,
        top_h=None,
        typical_p=None,
        epsilon_cutoff=None,
        eta_cutoff=None,
        watermarking_config=None,
        renormalize_logits=False,
        repetition_penalty=1.0,  # a downloaded Qwen2.5-Instruct's generation_config.json asks for 1.1
        max_new_tokens=s.max_new_tokens,
        eos_token_id=eos_token_ids,
        pad_token_id=pad_token_id,
        stopping_criteria=_when(interrupt),
        # the ids alone: a generation_config.json asking for scores or logits would keep them all again, and a
        # returned dict would keep the key/value cache alive past the call
        output_scores=False,
        output_logits=False,
        return_dict_in_generate=False,
    )
    sampled = sequences[:, input_ids.shape[1] :]
    return sampled, recorder.finish(sampled)


class _SampledLogprobs:
    """A logits processor, last in the list, that keeps only the sampled tokens' log-probs.

    Each call gets the scores the next token is sampled from; the token is known at the next call, the last of
    `input_ids`, so the processor holds a reference to the step's scores until then (`generate` holds the same
    tensor until its next step: nothing more is kept) and then keeps one value per sequence. The log-softmax of the
    whole step, then a gather, is what `output_scores` rows were turned into, so the values are the same to the bit.
    """

    def __init__(self):
        self.steps: list[torch.Tensor] = []  # (B,) per generated token whose id was known
        self.pending: torch.Tensor | None = None  # (B, V) scores of the step whose token is not yet known

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.pending is not None:
            self.steps.append(_logprob_of(self.pending, input_ids[:, -1]))
        self.pending = scores
        return scores

    def finish(self, sampled: torch.Tensor) -> torch.Tensor | None:
        """(B, T) log-probs of `sampled`: the last token's from the step still pending. A deferred stop check
        (transformers' `DeferredStopCheck`, on MPS) can run a step that `generate` then drops: only T are kept."""
        length = sampled.shape[1]
        if len(self.steps) < length and self.pending is not None:
            self.steps.append(_logprob_of(self.pending, sampled[:, len(self.steps)]))
        self.pending = None
        if not length:
            return None
        if len(self.steps) < length:  # a generate loop that samples without calling its processors
            raise RuntimeError(f"generate returned {length} tokens but scored {len(self.steps)}")
        return torch.stack(self.steps[:length], dim=1).cpu()


class _DrawFrom:
    """A logits processor, after the recorder, that samples each step's token from its own `torch.Generator` and
    leaves only that token possible, for a greedy `generate` to take: `torch.multinomial` on the softmax, as
    transformers' own sampling does, on another stream."""

    def __init__(self, generator: torch.Generator):
        self.generator = generator

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = scores.float().softmax(-1)
        tokens = torch.multinomial(probs.to(self.generator.device), 1, generator=self.generator).to(scores.device)
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(-1, tokens, 0.0)


class _DrawEach:
    """`_DrawFrom` with one generator per row: row i's token is drawn from `generators[i]` alone."""

    def __init__(self, generators: list[torch.Generator]):
        self.generators = generators

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = scores.float().softmax(-1)
        tokens = torch.cat(
            [torch.multinomial(probs[i : i + 1].to(g.device), 1, generator=g) for i, g in enumerate(self.generators)]
        ).to(scores.device)
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(-1, tokens, 0.0)


def _logprob_of(scores: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(B,) log-softmax of one step's (B, V) scores at each row's token: one fp32 row per sequence, while it lasts."""
    return scores.float().log_softmax(-1).gather(-1, tokens[:, None]).squeeze(-1)


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

    def rollout_seed(self) -> int:
        return self.rng.getrandbits(62)

    def act_keyed(self, turns: list[Turn], keys: list[int]) -> list[Reply]:
        """`act`, each turn drawing from a `random.Random` seeded with its key (rollout.turns=ready)."""
        replies = []
        for t, key in zip(turns, keys):
            actions = t.observation.admissible_actions
            action = random.Random(key).choice(actions) if actions else "look"
            replies.append(Reply(text=format_reply(action, t.reply_format)))
        return replies
