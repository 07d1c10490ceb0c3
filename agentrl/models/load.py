"""Load policy models and tokenizers: a local folder, a hub id, the embedded tiny model, or a registry model.

Nothing here downloads unless the hub is reachable; offline, a hub id that is
not in the local cache fails with one line that says how to point
`model.path` at a local copy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentrl.errors import UserError, first_line

# How a tokenizer trained with `tokenizers` saves itself (transformers 4: PreTrainedTokenizerFast,
# transformers 5: TokenizersBackend). Such a folder must be loaded from its tokenizer.json as is:
# AutoTokenizer on a folder that also holds a Qwen2 config rebuilds it as Qwen2Tokenizer and silently
# changes token ids (docs/architecture.md, "Loading the tokenizer"; seen here: "fridge 1" went from 2 to 3 ids).
PLAIN_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def torch_dtype(precision: str):
    """The torch dtype of hardware.precision; "auto" keeps the dtype the weights are stored in."""
    import torch

    if precision == "auto":
        return "auto"
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def resolve_model_source(model_cfg: Any, env_cfg: Any) -> str:
    """The folder or hub id to load: model.path, else the built tiny model, else the converted registry model,
    else model.hub_id."""
    if model_cfg.path:
        path = Path(model_cfg.path).expanduser()
        if not path.exists():
            raise UserError(f"model.path={model_cfg.path} does not exist")
        return str(path)
    if model_cfg.tiny is not None:
        from agentrl.models.tiny import ensure_tiny_model

        return str(ensure_tiny_model(model_cfg.tiny, env_cfg))
    if getattr(model_cfg, "registry", None):  # a run recorded before model.registry existed has none
        from agentrl.registry_models import ensure_registry_model

        return str(ensure_registry_model(model_cfg.registry))
    if model_cfg.hub_id:
        return model_cfg.hub_id
    raise UserError(f"model '{model_cfg.name}' has neither model.path nor model.hub_id")


def prompt_template_change(model_cfg: Any, env_cfg: Any) -> str | None:
    """One line where model.path was trained (by `agentrl sft` or `agentrl train`) on another prompt template than
    this run's env.prompt_template, else None. A model fine-tuned on one template plays another out of its
    distribution: SmolLM2's SFT start on `alfworld` against `compact` is a different start (docs/models.md)."""
    from agentrl.models.lora import training_config

    if not model_cfg.path or not Path(model_cfg.path).expanduser().is_dir():
        return None
    trained = training_config(Path(model_cfg.path).expanduser())
    trained_template = None if trained is None else trained.get("env", {}).get("prompt_template")
    if trained_template is None or trained_template == env_cfg.prompt_template:
        return None
    return (
        f"model.path={model_cfg.path} was trained on env.prompt_template={trained_template}, and this run prompts "
        f"with {env_cfg.prompt_template}; pass env.prompt_template={trained_template} to keep the prompts it learned"
    )


def load_tokenizer(source: str):
    """Load a tokenizer with left padding (generation continues from the right edge)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    loader = PreTrainedTokenizerFast if _tokenizer_class(Path(source)) in PLAIN_TOKENIZER_CLASSES else AutoTokenizer
    tokenizer = _from_hub(loader.from_pretrained, source)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _tokenizer_class(folder: Path) -> str | None:
    """The tokenizer class a local folder declares, if it is readable."""
    try:
        return json.loads((folder / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None  # a hub id, or a broken file that the loader will report


def load_model(source: str, precision: str = "fp32", device: str = "cpu", attention: str | None = None):
    """Load a causal LM for training or generation; `attention` is transformers' attention kernel (None: its
    default)."""
    from transformers import AutoModelForCausalLM

    kernel = {"attn_implementation": attention} if attention else {}
    model = _from_hub(AutoModelForCausalLM.from_pretrained, source, dtype=torch_dtype(precision), **kernel)
    return model.to(device)


def weights_precision(precision: str, device: str) -> str:
    """The dtype the trained weights are kept in. On a GPU, hardware.precision's (bf16 weights, no fp32 master
    copy). On a CPU always fp32: bf16 there is autocast (accelerate's, in the passes TRL and agentrl run), so
    AdamW's small steps are not lost to bf16's 8-bit mantissa."""
    return "fp32" if device == "cpu" else precision


def load_policy(model_cfg: Any, env_cfg: Any, hardware_cfg: Any):
    """(model, tokenizer) for `model=...` on `hardware=...`."""
    if hardware_cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("hardware.device=cuda but no CUDA device is visible; use hardware=cpu")
        # cuDNN's attention backward (torch's default SDPA kernel on H100/H200 since 2.11) returns NaN query
        # gradients when a row is left-padded (fully masked) and the width is 64 modulo 128; the optimizer step
        # then makes every weight NaN (pytorch/pytorch#196678, huggingface/trl#7181; seen here on an H100 with a
        # Qwen2.5-1.5B-shaped model, torch 2.11). The flash and memory-efficient kernels take over.
        torch.backends.cuda.enable_cudnn_sdp(False)
    source = resolve_model_source(model_cfg, env_cfg)
    tokenizer = load_tokenizer(source)
    device = hardware_cfg.device
    attention = getattr(model_cfg, "attn_implementation", None)  # a run recorded before the key has none
    model = load_model(source, weights_precision(hardware_cfg.precision, device), device, attention)
    return model, tokenizer


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")


def _hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP connect to the hub, so that an offline machine fails in seconds, not after a minute of retries."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _from_hub(loader, source: str, **kwargs):
    """Call a from_pretrained loader on a folder or a hub id; every failure becomes one line."""
    if Path(source).exists():
        try:
            return loader(source, **kwargs)
        except Exception as err:  # a corrupt or partial folder (SafetensorError, JSON errors, ...) is bad input
            raise UserError(f"cannot load the model in {source}: {first_line(err)}") from None
    try:
        return loader(source, local_files_only=True, **kwargs)  # the local Hugging Face cache
    except (OSError, ValueError):
        pass
    if _offline() or not _hub_reachable():
        raise UserError(
            f"model '{source}' is not in the local Hugging Face cache and the hub cannot be reached; "
            f"download it where there is network (`hf download {source}`) and pass model.path=/path/to/the/copy"
        )
    try:
        return loader(source, **kwargs)
    except (OSError, ValueError) as err:
        raise UserError(f"cannot load model '{source}' from the hub: {first_line(err)}") from None
