"""LoRA through PEFT: the adapter config from `model.lora`, and loading or merging a trained adapter.

TRL wraps the policy with `get_peft_model` when given a `peft_config`; its KL reference is then
the same model with the adapter disabled, so no second copy of the weights is kept. A LoRA
checkpoint holds only the adapter (adapter_config.json + adapter_model.safetensors) beside the
tokenizer and agentrl_config.yaml; its base model is found again when it is loaded:

1. the folder the adapter was trained on (adapter_config.json's base_model_name_or_path), while it
   still exists: that is exactly the base the adapter belongs to (for model=tiny, the cached build);
2. else the training config's `model` section (model.path, the tiny model, rebuilt if it is not
   cached, or model.hub_id), through `models.resolve_model_source`;
3. else base_model_name_or_path as a hub id.

`merge_adapter` writes base + adapter as one plain model that loads without PEFT (`agentrl export`).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from agentrl.checkpoints import ADAPTER_CONFIG, MODEL_CONFIG, TRAINING_CONFIG
from agentrl.errors import UserError, first_line

log = logging.getLogger(__name__)

ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MERGED = "merged"  # <checkpoint>/merged: the merged model written by model.lora.merge_on_save
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def peft_config(lora_cfg: Any):
    """A `peft.LoraConfig` for `model.lora`, or None when LoRA is off."""
    if lora_cfg is None or not lora_cfg.enabled:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=lora_cfg.rank,
        lora_alpha=lora_cfg.alpha,
        lora_dropout=lora_cfg.dropout,
        target_modules=list(lora_cfg.target_modules),
        task_type="CAUSAL_LM",
    )


def is_adapter_checkpoint(folder: Path | str) -> bool:
    """Whether a checkpoint folder holds a LoRA adapter rather than full weights."""
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def _adapter_config(checkpoint: Path) -> dict:
    try:
        config = json.loads((checkpoint / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as err:
        raise UserError(
            f"cannot load the LoRA adapter in {checkpoint}: {ADAPTER_CONFIG} is unreadable ({first_line(err)})"
        ) from None
    if not isinstance(config, dict):
        raise UserError(f"cannot load the LoRA adapter in {checkpoint}: {ADAPTER_CONFIG} is not a JSON object")
    return config


def training_config(checkpoint: Path | str) -> Any | None:
    """The config a checkpoint was trained with (its agentrl_config.yaml), or None for a plain model folder."""
    from omegaconf import OmegaConf

    saved = Path(checkpoint) / TRAINING_CONFIG
    if not saved.is_file():
        return None
    try:
        return OmegaConf.load(saved)
    except Exception as err:  # YAML errors of every kind
        raise UserError(f"cannot read {saved}: {first_line(err)}") from None


def base_model_source(checkpoint: Path | str, trained: Any | None = None) -> str:
    """The folder or hub id of the base model a LoRA checkpoint's adapter was trained on (see the module doc)."""
    from agentrl.models.load import resolve_model_source

    checkpoint = Path(checkpoint)
    recorded = _adapter_config(checkpoint).get("base_model_name_or_path") or None
    if recorded and Path(recorded).expanduser().is_dir():
        return str(Path(recorded).expanduser())
    trained = trained if trained is not None else training_config(checkpoint)
    if trained is not None and "model" in trained:
        try:
            source = resolve_model_source(trained.model, trained.env)
            if recorded:
                log.warning(
                    "the base model the LoRA adapter in %s was trained on (%s) is gone; using %s from its "
                    "training config",
                    checkpoint,
                    recorded,
                    source,
                )
            return source
        except UserError as err:
            if not recorded:
                raise UserError(f"cannot find the base model of the LoRA adapter in {checkpoint}: {err}") from None
    if recorded:
        return str(recorded)
    raise UserError(
        f"cannot find the base model of the LoRA adapter in {checkpoint}: neither {TRAINING_CONFIG} "
        f"nor {ADAPTER_CONFIG} (base_model_name_or_path) names it"
    )


def checkpoint_tokenizer(checkpoint: Path | str, base_source: str):
    """The tokenizer saved with the checkpoint, else the base model's."""
    from agentrl.models.load import load_tokenizer

    checkpoint = Path(checkpoint)
    has_own = any((checkpoint / name).is_file() for name in _TOKENIZER_FILES)
    return load_tokenizer(str(checkpoint) if has_own else base_source)


def check_adapter_files(checkpoint: Path) -> None:
    """A one-line UserError unless the adapter's config and weights are there and readable."""
    _adapter_config(checkpoint)
    weights = [checkpoint / name for name in ADAPTER_WEIGHTS if (checkpoint / name).is_file()]
    if not weights:
        raise UserError(f"cannot load the LoRA adapter in {checkpoint}: no {' or '.join(ADAPTER_WEIGHTS)}")
    if weights[0].suffix == ".safetensors":
        try:
            from safetensors import safe_open

            with safe_open(str(weights[0]), framework="pt") as f:
                if not list(f.keys()):
                    raise ValueError("it holds no tensors")
        except Exception as err:  # SafetensorError, truncated headers, ...
            raise UserError(
                f"cannot load the LoRA adapter in {checkpoint}: {weights[0].name} is unreadable ({first_line(err)})"
            ) from None


def load_adapter_checkpoint(
    checkpoint: Path | str,
    base_source: str,
    precision: str = "fp32",
    device: str = "cpu",
    merge: bool = True,
    attention: str | None = None,
):
    """The base model with the checkpoint's adapter: merged into a plain model (`merge`), or a PeftModel."""
    from agentrl.models.load import load_model

    checkpoint = Path(checkpoint)
    check_adapter_files(checkpoint)
    base = load_model(base_source, precision, device, attention)
    try:
        import warnings

        from peft import PeftModel

        with warnings.catch_warnings():  # PEFT warns of adapter weights that fit no module; the check below fails
            warnings.filterwarnings("ignore", message="Found missing adapter keys")
            model = PeftModel.from_pretrained(base, str(checkpoint), is_trainable=False)
        _check_adapter_applied(model, checkpoint)
    except UserError:
        raise
    except Exception as err:  # a wrong base (shapes, missing modules), a corrupt file, an unknown PEFT type
        raise UserError(f"cannot load the LoRA adapter in {checkpoint} onto {base_source}: {first_line(err)}") from None
    model.eval()
    return model.merge_and_unload() if merge else model


def _check_adapter_applied(model, checkpoint: Path) -> None:
    """PEFT only warns when the saved adapter's weights do not match the wrapped modules; that is an error here."""
    from safetensors import safe_open

    path = checkpoint / ADAPTER_WEIGHTS[0]
    if not path.is_file():
        return
    with safe_open(str(path), framework="pt") as f:
        saved = {k for k in f.keys() if "lora_" in k}
    wrapped = {name for name, _ in model.named_parameters() if "lora_" in name}
    # saved keys omit the adapter name: "...q_proj.lora_A.weight" is "...q_proj.lora_A.default.weight" in the model
    missing = [
        k
        for k in saved
        if k.replace(".lora_A.", ".lora_A.default.").replace(".lora_B.", ".lora_B.default.") not in wrapped
    ]
    if missing:
        raise UserError(
            f"cannot load the LoRA adapter in {checkpoint}: {len(missing)} of its weights match no module "
            f"of the base model (e.g. {missing[0]}); is it the base it was trained on?"
        )


def load_checkpoint(
    checkpoint: Path | str,
    precision: str = "fp32",
    device: str = "cpu",
    trained: Any | None = None,
    attention: str | None = None,
):
    """(model, tokenizer) of a checkpoint folder: full weights, or a LoRA adapter merged into its base; `attention`
    is transformers' attention kernel (model.attn_implementation; None: its default)."""
    from agentrl.models.load import load_model, load_tokenizer

    checkpoint = Path(checkpoint)
    if not is_adapter_checkpoint(checkpoint):
        return load_model(str(checkpoint), precision, device, attention), load_tokenizer(str(checkpoint))
    check_adapter_files(checkpoint)
    base = base_model_source(checkpoint, trained)
    tokenizer = checkpoint_tokenizer(checkpoint, base)
    return load_adapter_checkpoint(checkpoint, base, precision, device, attention=attention), tokenizer


def merge_adapter(checkpoint: Path | str, out_dir: Path | str, precision: str = "auto") -> Path:
    """Write the checkpoint as a plain model + tokenizer that loads without PEFT (model.path=OUT, agentrl eval OUT).

    A LoRA checkpoint is merged into its base; a full checkpoint is written as it is. The training config is
    copied along, so that `agentrl eval OUT` keeps the run's environment and generation settings. `precision`
    "auto" keeps the dtype the weights are stored in. OUT must not exist or be empty; it appears whole or not at all.
    """
    from agentrl.models.load import load_model, load_tokenizer

    checkpoint, out_dir = Path(checkpoint), Path(out_dir).expanduser()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UserError(f"{out_dir} already exists and is not an empty folder; choose a new one")
    if is_adapter_checkpoint(checkpoint):
        model, tokenizer = load_checkpoint(checkpoint, precision, "cpu")
    elif (checkpoint / MODEL_CONFIG).is_file():
        model, tokenizer = load_model(str(checkpoint), precision, "cpu"), load_tokenizer(str(checkpoint))
    else:
        raise UserError(f"{checkpoint} holds no model (neither {ADAPTER_CONFIG} nor {MODEL_CONFIG})")
    staging = out_dir.parent / f".{out_dir.name}.partial"
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if (checkpoint / TRAINING_CONFIG).is_file():
            shutil.copy2(checkpoint / TRAINING_CONFIG, staging / TRAINING_CONFIG)
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        staging.rename(out_dir)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise UserError(f"cannot write the merged model to {out_dir}: {err.strerror or first_line(err)}") from None
    return out_dir


def merge_on_save(checkpoint_dir: Path | str) -> Path:
    """`model.lora.merge_on_save`: the merged model in `<checkpoint>/merged/` (reads the adapter saved there)."""
    checkpoint_dir = Path(checkpoint_dir)
    target = checkpoint_dir / MERGED
    if target.exists():
        shutil.rmtree(target)
    return merge_adapter(checkpoint_dir, target)


def servable_model(checkpoint: Path | str, scratch: Path | str) -> str:
    """A folder with plain weights for engines without PEFT (vLLM): the checkpoint itself, its merged/ from
    merge_on_save, or the adapter merged into `scratch` now."""
    checkpoint = Path(checkpoint)
    if not is_adapter_checkpoint(checkpoint):
        return str(checkpoint)
    if (checkpoint / MERGED / MODEL_CONFIG).is_file():
        return str(checkpoint / MERGED)
    return str(merge_adapter(checkpoint, Path(scratch) / MERGED))
