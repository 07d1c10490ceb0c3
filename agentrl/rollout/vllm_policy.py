"""Collector policies that generate with vLLM: inside training through TRL, and for `agentrl eval`.

`TrainerVLLMPolicy` calls the trainer's own `vllm_generation` (TRL's colocate engine or its
`trl vllm-serve` client), so that weight sync stays TRL's. TRL's generation is collective when
there are several ranks: server mode gathers every rank's prompts on rank 0 and hands rank r the
slice [r*n, (r+1)*n), and colocate with tensor_parallel_size > 1 does the same inside each
tensor-parallel group; both assume every rank passes the same number n of prompts, and a rank
that skips a call hangs the others. The lockstep collector has a different number of active
episodes on each rank, so this policy pads every rank's prompts to the largest count, drops the
padding's outputs, and (through `keep_going`) keeps every rank in every turn until all are done.

`VLLMEvalPolicy` is a plain `vllm.LLM` around a checkpoint folder.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Any, Protocol

from agentrl.rollout.collector import Reply, Turn
from agentrl.rollout.policies import SamplingSpec, _cut_at_eos, chat_prompt_ids, turns_prompt_ids


class World(Protocol):
    """The collectives the policy needs, so that tests can drive ranks without torch.distributed."""

    size: int

    def max_int(self, n: int) -> int: ...  # the largest n over all ranks

    def any(self, flag: bool) -> bool: ...  # whether any rank passed True


class AccelerateWorld:
    """The training processes, through accelerate's gather (works on NCCL and gloo alike)."""

    def __init__(self, accelerator):
        self.accelerator = accelerator
        self.size = int(accelerator.num_processes)

    def max_int(self, n: int) -> int:
        if self.size == 1:
            return n
        return int(self._gather(n).max().item())

    def any(self, flag: bool) -> bool:
        if self.size == 1:
            return bool(flag)
        return bool(self._gather(int(flag)).max().item() > 0)

    def _gather(self, value: int):
        import torch

        return self.accelerator.gather(torch.tensor([value], dtype=torch.long, device=self.accelerator.device))


class TrainerVLLMPolicy:
    """Generates through `trainer.vllm_generation`; replies carry the sampled tokens' vLLM log-probs."""

    def __init__(
        self,
        trainer,
        sampling: SamplingSpec,
        eos_token_ids: list[int] | None = None,
        world: World | None = None,
        engine_lock: contextlib.AbstractContextManager | None = None,
    ):
        self.trainer, self.sampling = trainer, sampling
        # held around each weight sync and generation: an asynchronous rollout worker shares the engine
        self.engine_lock = engine_lock if engine_lock is not None else contextlib.nullcontext()
        self.tokenizer = trainer.processing_class
        self.generation = trainer.vllm_generation
        self.world = world if world is not None else AccelerateWorld(trainer.accelerator)
        self.eos_token_ids = _eos_ids(self.tokenizer, eos_token_ids)
        self._filler: list[int] | None = None

    def keep_going(self, local_active: bool) -> bool:
        """Whether any rank still has an active episode; the collector asks every turn (a collective)."""
        return self.world.any(local_active)

    def act(self, turns: list[Turn]) -> list[Reply]:
        s = self.sampling
        prompts = turns_prompt_ids(self.tokenizer, turns, s.max_prompt_tokens)
        count = self.world.max_int(len(prompts)) if self.world.size > 1 else len(prompts)
        if count == 0:
            return []  # no rank has a prompt (or a single rank has none): every rank skips the same call
        padded = pad_prompts(prompts, count, self._filler_prompt())
        with self.engine_lock:
            self._sync_weights_if_stale()
            with _sampling_applied(self.generation, s):
                _, completions, logprobs, logprob_token_ids = self.generation.generate(
                    prompts=padded, images=None, num_generations=1
                )
        return [
            self._reply(
                prompt_ids,
                completions[i],
                logprobs[i] if logprobs is not None else None,
                logprob_token_ids[i] if logprob_token_ids is not None else None,
            )
            for i, prompt_ids in enumerate(prompts)  # the padding's outputs are dropped here
        ]

    def _sync_weights_if_stale(self) -> None:
        """Push the policy's weights to vLLM once per optimizer step, exactly as TRL's own generation does (and again
        after an asynchronous rollout worker loaded a job's weights: it sets `_last_loaded_step` to None)."""
        trainer = self.trainer
        if trainer.state.global_step != trainer._last_loaded_step:
            self.generation.sync_weights()
            trainer._last_loaded_step = trainer.state.global_step

    def _filler_prompt(self) -> list[int]:
        """A short valid prompt for padding: an empty user turn in the model's chat format."""
        if self._filler is None:
            self._filler = chat_prompt_ids(self.tokenizer, "", self.sampling.max_prompt_tokens)
        return self._filler

    def _reply(self, prompt_ids: list[int], completion: Sequence[int], logprobs, logprob_token_ids) -> Reply:
        completion = _cut_at_eos(list(completion), self.eos_token_ids)
        sampled = sampled_token_logprobs(completion, logprobs, logprob_token_ids)
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        return Reply(text=text, prompt_ids=prompt_ids, completion_ids=completion, logprobs=sampled)


def pad_prompts(prompts: list[list[int]], count: int, filler: list[int]) -> list[list[int]]:
    """`prompts` followed by copies of `filler` up to `count`, so that every rank passes the same number."""
    if count < len(prompts):
        raise ValueError(f"cannot pad {len(prompts)} prompts down to {count}")
    return list(prompts) + [list(filler) for _ in range(count - len(prompts))]


def sampled_token_logprobs(completion: Sequence[int], logprobs, logprob_token_ids=None) -> list[float] | None:
    """The log-prob of each sampled token, from vLLM's (T, k) per-position log-prob lists.

    TRL asks vLLM for logprobs=0, so each position holds the sampled token alone; where more are
    given, the entry of the sampled token is taken. A missing value (vLLM's NaN, sent as None)
    becomes NaN, which the importance-sampling ratio treats as "no correction".
    """
    if logprobs is None:
        return None
    out = []
    for pos, token in enumerate(completion):
        entries = logprobs[pos]
        at = 0
        if logprob_token_ids is not None and token in logprob_token_ids[pos]:
            at = list(logprob_token_ids[pos]).index(token)
        value = entries[at]
        out.append(math.nan if value is None else float(value))
    return out


@contextlib.contextmanager
def _sampling_applied(generation, sampling: SamplingSpec):
    """Generate with this policy's sampling (rollout or eval), then restore TRL's settings.

    VLLMGeneration reads these attributes on every `generate` call. Greedy is temperature 0 in vLLM.
    """
    wanted = {
        "temperature": 0.0 if sampling.greedy else sampling.temperature,
        "top_p": 1.0 if sampling.greedy else sampling.top_p,
        "max_completion_length": sampling.max_new_tokens,
    }
    saved = {name: getattr(generation, name) for name in wanted}
    for name, value in wanted.items():
        setattr(generation, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(generation, name, value)


def _eos_ids(tokenizer, eos_token_ids: list[int] | None) -> list[int]:
    eos = eos_token_ids or [tokenizer.eos_token_id]
    return [e for e in eos if e is not None]


# --------------------------------------------------------------------------- agentrl eval


class VLLMEvalPolicy:
    """A plain vLLM engine: one batched `generate` per turn, sampled-token log-probs included."""

    def __init__(self, llm, tokenizer, sampling: SamplingSpec, eos_token_ids: list[int] | None = None):
        from vllm import SamplingParams

        self.llm, self.tokenizer, self.sampling = llm, tokenizer, sampling
        self.eos_token_ids = _eos_ids(tokenizer, eos_token_ids)
        self.params = SamplingParams(
            temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            logprobs=0,  # the sampled token's log-prob only
            stop_token_ids=self.eos_token_ids,  # the same stop set as the HF path, not only the config's EOS
        )

    def act(self, turns: list[Turn]) -> list[Reply]:
        if not turns:
            return []
        prompts = turns_prompt_ids(self.tokenizer, turns, self.sampling.max_prompt_tokens)
        outputs = self.llm.generate(
            [{"prompt_token_ids": p} for p in prompts], sampling_params=self.params, use_tqdm=False
        )
        return [reply_of_output(self.tokenizer, p, output, self.eos_token_ids) for p, output in zip(prompts, outputs)]

    def close(self) -> None:
        """Stop the engine's processes now. vLLM's own clean-up is a finalizer that can run after multiprocessing's
        exit hook, which waits for the engine process (not a daemon) to end: the interpreter then never exits."""
        engine_core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None:
            engine_core.shutdown()


def make_eval_policy(
    model_source: str,
    tokenizer,
    sampling: SamplingSpec,
    vllm_cfg: Any,
    *,
    seed: int = 0,
    dtype: str = "auto",
    eos_token_ids: list[int] | None = None,
) -> VLLMEvalPolicy:
    """A `vllm.LLM` around a checkpoint folder (or hub id), sized by `rollout.vllm`.

    Server mode is a training arrangement; evaluation always runs its own engine in this process.
    """
    try:
        from vllm import LLM
    except ImportError as err:
        from agentrl.errors import UserError

        raise UserError("rollout.backend=vllm needs vLLM, which is not installed: pip install 'agentrl[vllm]'") from err
    llm = LLM(
        model=model_source,
        tensor_parallel_size=int(vllm_cfg.tensor_parallel_size),
        gpu_memory_utilization=float(vllm_cfg.gpu_memory_utilization),
        max_model_len=vllm_cfg.max_model_length,
        seed=seed,
        dtype=dtype,
        enforce_eager=bool(vllm_cfg.enforce_eager),
        # log-probs after temperature scaling and logit processing, as TRL asks for: the behaviour policy's
        logprobs_mode="processed_logprobs",
    )
    return VLLMEvalPolicy(llm, tokenizer, sampling, eos_token_ids)


def reply_of_output(tokenizer, prompt_ids: list[int], output, eos_token_ids: list[int]) -> Reply:
    """A reply from one of `vllm.LLM.generate`'s outputs: cut at the first EOS, with the sampled tokens' log-probs."""
    sample = output.outputs[0]
    completion = _cut_at_eos(list(sample.token_ids), eos_token_ids)
    logprobs = None
    if sample.logprobs is not None:
        logprobs = [_logprob_of(step, token) for step, token in zip(sample.logprobs, completion)]
    text = tokenizer.decode(completion, skip_special_tokens=True)
    return Reply(text=text, prompt_ids=prompt_ids, completion_ids=completion, logprobs=logprobs)


def _logprob_of(position: dict, token: int) -> float:
    """The sampled token's log-prob from vLLM's {token id: Logprob} of one position; NaN when absent."""
    entry = position.get(token)
    return math.nan if entry is None or entry.logprob is None else float(entry.logprob)
