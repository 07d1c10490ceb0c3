"""Every field of the train and eval schemas, walked with edge values: each value gives a config that passes the
checks or one line (a UserError) that names the field, never another exception (which the CLI would show as a
traceback). In-process, through the same path a sweep's values take in the preflight (compose once, then Hydra's
own override on a copy, then agentrl's checks), so that the whole walk takes seconds; a few real CLI runs below
check that such an error is one line with exit code 2.

Also: each number and string states its valid values beside it (agentrl/config/, `valid(...)`); the tiny model's
dimensions that pass the checks build a model that runs; and the output folder's failures are one line.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig, OmegaConf

from agentrl.cli.launch import preflight, with_override
from agentrl.config.checks import check_config
from agentrl.config.typed import typed
from agentrl.errors import UserError
from tests.conftest import hydra_initialized

# The bases: each environment's schema for train, the tiny model's fields (model=tiny, the default), eval.
BASES = {
    "train": ("train", []),
    "train env=alfworld": ("train", ["env=alfworld"]),
    "eval": ("eval", []),
    "sft": ("sft", []),  # its own keys only (sft.*): the rest is the training schema, walked above
}
EDGES = ["0", "-1", "1", "1e30", "100000000000000000000", "''", "abc", "null", "[1]", "1.5", "nan", "inf", "true"]


def _env_options() -> list[str]:
    from agentrl.hydra_paths import config_dir

    return sorted(p.stem for p in (config_dir() / "env").glob("*.yaml"))


@functools.cache
def _composed():
    """Each base composed once: {name: (config name, composed config)}."""
    from hydra import compose

    with hydra_initialized():
        for env in _env_options():
            BASES.setdefault(f"train env={env}", ("train", [f"env={env}"]))
        return {
            name: (config_name, compose(config_name=config_name, overrides=overrides))
            for name, (config_name, overrides) in BASES.items()
        }


@pytest.fixture(scope="module")
def bases():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return _composed(), OverridesParser.create()


def _leaves(node, prefix=""):
    """(key, schema field) for every leaf of a composed config, with the dataclass field it comes from."""
    schema = OmegaConf.get_type(node)
    fields = {f.name: f for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else {}
    for key in node:
        value = node._get_node(key)
        path = f"{prefix}{key}"
        if isinstance(value, DictConfig) and not value._is_none():
            yield from _leaves(value, f"{path}.")
        elif key in fields:
            yield path, fields[key]


@functools.cache
def _all_fields_static() -> list[tuple[str, str]]:
    """(base, key) for every leaf field, each field once per schema (train, eval)."""
    composed, seen = _composed(), set()
    out = []
    for base, (_, cfg) in composed.items():
        for key, _field in _leaves(cfg):
            if base == "sft" and not key.startswith("sft."):
                continue
            name = f"{base.split()[0]}:{key}"
            if name not in seen:
                seen.add(name)
                out.append((base, key))
    return out


def test_the_walk_covers_every_field_of_both_schemas(bases):
    """Every field of TrainConfig, EvalRunConfig and SftConfig (and of each env schema and the tiny model) is walked."""
    from agentrl.config.run import EvalRunConfig, TrainConfig
    from agentrl.config.sft import SftConfig

    walked = {key for base, key in _all_fields_static() if base.startswith("train")}
    schema_leaves = set()

    def leaves_of(cls, prefix=""):
        for f in dataclasses.fields(cls):
            inner = _dataclass_of(f.type)
            if inner is not None:
                leaves_of(inner, f"{prefix}{f.name}.")
            elif f.name != "env":
                schema_leaves.add(f"{prefix}{f.name}")

    leaves_of(TrainConfig)
    assert schema_leaves - walked == set()
    schema_leaves.clear()
    leaves_of(EvalRunConfig)
    assert schema_leaves - {key for base, key in _all_fields_static() if base == "eval"} == set()
    schema_leaves.clear()
    leaves_of(SftConfig, "sft.")
    assert schema_leaves - {key for base, key in _all_fields_static() if base == "sft"} == set()
    print(f"fields walked: {len(_all_fields_static())}")


def _dataclass_of(annotation):
    from agentrl.config import algo, envs, model, run, sft

    name = str(annotation).replace(" | None", "").strip()
    cls = next((getattr(m, name) for m in (algo, envs, model, run, sft) if hasattr(m, name)), None)
    return cls if dataclasses.is_dataclass(cls) else None


def test_every_number_and_string_states_its_valid_values(bases):
    """Each int, float and str field of the schemas carries `valid(...)` beside it."""
    (composed, _) = bases
    missing = []
    for base, (_, cfg) in composed.items():
        for key, spec in _leaves(cfg):
            kind = str(spec.type)
            if any(t in kind for t in ("int", "float", "str")) and "bool" not in kind and "valid" not in spec.metadata:
                missing.append(f"{base}: {key} ({kind})")
    assert sorted(set(missing)) == [], sorted(set(missing))


def _walk(bases, base: str, key: str, value: str) -> str | None:
    """The error line for `key=value` on the base config, or None when the config passes every check."""
    (composed, parser) = bases
    config_name, cfg = composed[base]
    try:
        variant = with_override(config_name, parser, cfg, f"{key}={value}")
        check_config(typed(variant))  # as the preflight does it
    except UserError as err:
        return str(err)
    return None


@pytest.mark.parametrize("base,key", [pytest.param(b, k, id=f"{b}:{k}") for b, k in _all_fields_static()])
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    value=st.sampled_from(EDGES)
    | st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.floats(allow_nan=True, allow_infinity=True).map(repr)
    | st.text(alphabet="abc xyz_-./", max_size=8).map(lambda t: f"'{t}'")
)
def test_every_field_with_edge_values_is_valid_or_one_line(bases, base, key, value):
    line = _walk(bases, base, key, value)
    if line is None:
        return
    assert "\n" not in line and line.strip() == line, line
    leaf = key.rsplit(".", 1)[-1]
    assert leaf in line or key.split(".")[0] in line, f"{key}={value}: the line does not name the field: {line}"


# --------------------------------------------------------------------------- the tiny model's dimensions


@settings(max_examples=25, deadline=None)
@given(
    hidden=st.integers(2, 48),
    heads=st.integers(1, 8),
    kv=st.none() | st.integers(1, 8),
    layers=st.integers(1, 2),
)
def test_tiny_dimensions_that_pass_the_checks_build_a_model_that_runs(hidden, heads, kv, layers):
    """The rule between the tiny model's fields is the model's own: what passes builds and runs a forward pass,
    what does not is one line naming the fields (these made a ZeroDivisionError or a shape error before)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentrl.config.checks import check_tiny
    from agentrl.config.model import TinyModelConfig

    tiny = TinyModelConfig(hidden_size=hidden, intermediate_size=8, num_layers=layers, num_heads=heads, num_kv_heads=kv)
    try:
        check_tiny(tiny)
    except UserError as err:
        assert "\n" not in str(err) and "model.tiny." in str(err)
        return
    config = Qwen2Config(
        vocab_size=32,
        hidden_size=hidden,
        intermediate_size=8,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv or heads,
        max_position_embeddings=16,
    )
    logits = Qwen2ForCausalLM(config)(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 32) and torch.isfinite(logits).all()


# --------------------------------------------------------------------------- the output folder


def _output_folder_cases(tmp: Path) -> dict[str, str]:
    blocker = tmp / "a-file"
    blocker.write_text("")
    locked = tmp / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    return {
        "a file in the way": str(blocker),
        "a file in the way of a parent": str(blocker / "run"),
        "a parent that cannot exist": "/proc/agentrl-no-such-folder/run",
        "a name too long for the filesystem": str(tmp / ("x" * 300) / "run"),
        "a read-only location": "/sys/agentrl-run",
        "no permission": str(locked / "run"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "a file in the way",
        "a file in the way of a parent",
        "a parent that cannot exist",
        "a name too long for the filesystem",
        "a read-only location",
        "no permission",
    ],
)
def test_an_output_folder_that_cannot_be_made_is_one_line(case, tmp_path):
    if case == "no permission" and os.geteuid() == 0:
        pytest.skip("root may write into a folder without write permission")
    if case in ("a parent that cannot exist", "a read-only location") and not Path("/proc/self").is_dir():
        pytest.skip("uses Linux's /proc and /sys")
    folder = _output_folder_cases(tmp_path)[case]
    try:
        with pytest.raises(UserError) as err:
            preflight("train", [f"hydra.run.dir={folder}"], output_folder=True)
    finally:
        (tmp_path / "locked").chmod(0o700)
    message = str(err.value)
    assert "\n" not in message and "hydra.run.dir" in message and "cannot be made" in message, message


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,expected",
    [
        (["env.max_steps=0"], "env.max_steps must be in [1, 1000] or null, got 0"),
        (["env.max_steps=100000000"], "env.max_steps must be in [1, 1000] or null, got 100000000"),
        (["model.tiny.num_heads=3"], "model.tiny.num_heads=3"),
        (["trainer.learning_rate=inf"], "trainer.learning_rate must be a finite number"),
        (["logger.project="], "logger.project"),
        (["seed=-1"], "seed must be in [0, 2147483648), got -1"),
        (["trainer.iterations=100000000000000000000"], "trainer.iterations=100000000000000000000 is too large"),
        (["hydra.run.dir=/proc/agentrl-no-such-folder/run"], "cannot be made or written"),
    ],
)
def test_bad_values_through_the_real_cli(args, expected, run_cli):
    result = run_cli("train", *args, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
