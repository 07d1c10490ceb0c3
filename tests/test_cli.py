"""The command line: fast help, one-line errors, composing every config option."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose

from agentrl.cli.launch import normalise_args, parse_args, preflight
from agentrl.config.checks import check_config
from agentrl.config.typed import typed
from agentrl.errors import UserError
from agentrl.hydra_paths import config_dir

CONF = config_dir()
GROUP_PREFIX = {"algo": "+", "debug": "+"}  # groups outside the defaults list are appended
# options with a key that has no default: composing them needs it (without it: one line, tests/test_bad_input.py)
REQUIRED_KEYS = {
    ("env", "gym"): ["env.factory=tests.envs.toy_gym:make_corridor"],
    ("env", "gem"): ["env.id=game:Sokoban-v0-easy"],
}


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


ALL_OPTIONS = [(g, o) for g in ("env", "model", "algo", "hardware", "logger", "debug") for o in _options(g)]


@pytest.mark.parametrize("group,option", ALL_OPTIONS)
def test_every_config_option_composes(hydra_conf, group, option):
    overrides = [f"{GROUP_PREFIX.get(group, '')}{group}={option}", *REQUIRED_KEYS.get((group, option), [])]
    cfg = typed(compose(config_name="train", overrides=overrides))
    if group == "hardware" and not option.startswith("cpu"):
        assert (
            cfg.hardware.device.value == "cuda"
        )  # check_config would look for a GPU (profiles: tests/test_profiles.py)
    else:
        check_config(cfg)


def test_eval_config_composes(hydra_conf):
    cfg = typed(compose(config_name="eval", overrides=["policy=random"]))
    check_config(cfg)
    assert cfg.policy.value == "random"


def test_every_yaml_opens_with_a_command():
    for path in CONF.rglob("*.yaml"):
        head = [line for line in path.read_text().splitlines()[:3] if "@package" not in line]
        assert head and head[0].startswith("# agentrl "), f"{path} must open with a command that uses it"


def test_algo_with_and_without_plus():
    assert normalise_args(["algo=grpo", "+algo=grpo", "algo.norm=std"]) == ["+algo=grpo", "+algo=grpo", "algo.norm=std"]
    preflight("train", normalise_args(["algo=grpo"]))
    preflight("train", ["+algo=grpo"])


def test_tiny_recipe_survives_the_algo_preset(hydra_conf):
    """+algo=grpo must not undo the tiny model's tuned normalisation and learning rate."""
    cfg = typed(compose(config_name="train", overrides=["+algo=grpo"]))
    assert cfg.algo.norm.value == "none" and cfg.trainer.learning_rate == pytest.approx(5e-4)
    real = typed(compose(config_name="train", overrides=["model=qwen2.5-1.5b-instruct", "+algo=grpo"]))
    assert real.algo.norm.value == "std" and real.algo.kl_coef == pytest.approx(0.01)


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["trainer.iteratons=5"], "did you mean trainer.iterations"),
        (["sed=3"], "did you mean seed"),
        (["env=nowhere"], "available: alfworld, gem, gym, household"),
        (["+algo=nope"], "available: arpo, epo, gigpo, grpo"),
        (["trainer.iterations=abc"], "trainer.iterations"),
        (["algo.norm=bogus"], "expected one of [none, std]"),
        (["trainer.group_size=0"], "trainer.group_size must be >= 1"),
        (["trainer.group_size=1"], "nothing to compare"),
        (["env.level=impossible"], "env.level='impossible' is unknown; choose one of easy, default"),
        (["env.max_steps=0"], "env.max_steps must be in [1, 1000] or null, got 0"),
        (["model.tiny.num_heads=3"], "must split into model.tiny.num_heads=3 heads"),
        (["trainer.learning_rate=nan"], "trainer.learning_rate must be a finite number"),
        (["seed=0,1,oops"], "seed"),  # every value of a sweep is checked
        (["model=qwen2.5-1.5b-instruct", "model.tiny.hidden_size=3"], "'model.tiny.hidden_size=3' cannot apply"),
    ],
)
def test_preflight_errors_are_one_line(overrides, expected):
    if expected is None:
        preflight("train", overrides)
        return
    with pytest.raises(UserError) as err:
        preflight("train", overrides)
    message = str(err.value)
    assert "\n" not in message
    assert expected in message


def test_hydra_parses_flags_and_overrides_in_any_order():
    command = parse_args(["+algo=grpo", "-m", "algo=gigpo,grpo"])
    assert command.flags == ["-m"] and command.overrides == ["+algo=grpo", "+algo=gigpo,grpo"]
    assert command.parsed.multirun and command.runs_job
    assert not parse_args(["--info", "defaults", "seed=1"]).runs_job
    assert parse_args(["--cfg", "job", "-p", "algo", "seed=1"]).flags == ["--cfg", "job", "-p", "algo"]


@pytest.mark.parametrize(
    "args,expected",
    [
        (["-x"], "unrecognized arguments: -x"),
        (["--cfg", "bogus"], "invalid choice: 'bogus'"),
        (["-m", "--cfg", "job"], "only one of --run, --multirun, --cfg"),
    ],
)
def test_bad_flags_are_one_line(args, expected):
    with pytest.raises(UserError) as err:
        parse_args(args)
    assert expected in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["env=household,nowhere"], "unknown option 'nowhere' for env"),  # a group's value: composed on its own
        (["seed=range(0,50)", "trainer.group_size=2,4,0"], "trainer.group_size must be >= 1"),  # applied to a copy
        (["hydra.job.chdir=true,false"], "Sweeping over Hydra's configuration is not supported"),
    ],
)
def test_every_value_of_a_multirun_sweep_is_checked(overrides, expected):
    with pytest.raises(UserError) as err:
        preflight("train", overrides, multirun=True)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_sweep_without_multirun_is_hydras_one_line_error():
    with pytest.raises(UserError) as err:
        preflight("train", ["seed=0,1"])
    assert str(err.value).startswith("Ambiguous value for argument 'seed=0,1'") and "--multirun" in str(err.value)


def test_misspelled_key_ends_the_command_with_one_line(run_cli):
    result = run_cli("train", "trainer.iteratons=5")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("error: unknown config key 'trainer.iteratons'; did you mean trainer.iterations")
    assert "Traceback" not in result.stdout + result.stderr


def test_help_is_fast_and_imports_no_torch():
    code = (
        "import sys; from typer.testing import CliRunner; from agentrl.cli import app; "
        "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output; "
        "assert 'train' in r.output; print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_envs_lists_household(run_cli):
    result = run_cli("envs")
    assert result.returncode == 0
    assert "household" in result.stdout and "yes" in result.stdout


def test_config_prints_the_composed_config(run_cli):
    result = run_cli("config", "env=household", "seed=7")
    assert result.returncode == 0, result.stderr
    assert "seed: 7" in result.stdout and "name: household" in result.stdout


def test_env_kwargs_on_the_command_line_take_the_users_keys(run_cli):
    """`env.kwargs={...}` (the factory's keyword arguments, whose keys no schema lists) is taken as given."""
    result = run_cli(
        "config", "env=gym", "env.factory=toy_gym:make_corridor", "env.kwargs={length: 5}", "env.ood_kwargs={length: 9}"
    )
    assert result.returncode == 0, result.stderr
    assert "kwargs:\n    length: 5" in result.stdout and "ood_kwargs:\n    length: 9" in result.stdout


def test_config_dir_adds_experiments_of_ones_own(tmp_path):
    """`--config-dir DIR +experiment=NAME` finds DIR/experiment/NAME.yaml, in the checks as in the job."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\ntrainer:\n  iterations: 7\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrl.cli",
            "train",
            "--config-dir",
            str(tmp_path),
            "+experiment=mine",
            "--cfg",
            "job",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "  iterations: 7\n" in result.stdout


def test_config_dir_joins_a_search_path_given_too(tmp_path):
    from agentrl.hydra_paths import with_config_dir

    entry = f"file://{tmp_path.resolve()}"
    assert with_config_dir(["seed=1"], None) == ["seed=1"]
    assert with_config_dir(["seed=1"], str(tmp_path)) == ["seed=1", f"hydra.searchpath=[{entry}]"]
    assert with_config_dir(["hydra.searchpath=[pkg://x]"], str(tmp_path)) == [f"hydra.searchpath=[pkg://x,{entry}]"]
    with pytest.raises(UserError, match="^--config-dir .*nowhere is not a folder$"):
        with_config_dir([], str(tmp_path / "nowhere"))


@pytest.mark.parametrize("algo", ["algo=grpo", "+algo=grpo"])
def test_an_experiment_that_chooses_an_algo_takes_another_from_the_command_line(algo):
    """conf/experiment/smollm2_household_cpu.yaml chooses gigpo in its defaults; `algo=grpo` overrides it (Hydra
    alone says "Multiple values for algo" to the `+algo=grpo` agentrl makes of it)."""
    from agentrl.cli.launch import preflight_groups

    cfg, group = preflight_groups("train", normalise_args(["+experiment=smollm2_household_cpu", algo]))
    assert group == "algo"
    assert cfg.algo.estimator.value == "grpo"
    result = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "train", "+experiment=smollm2_household_cpu", algo, "--cfg", "job"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "  estimator: grpo\n" in result.stdout


def test_an_appended_algo_without_an_experiment_is_unchanged():
    from agentrl.cli.launch import preflight_groups

    cfg, group = preflight_groups("train", normalise_args(["algo=gigpo"]))
    assert group is None and cfg.algo.estimator.value == "gigpo"
