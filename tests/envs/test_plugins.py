"""The plug-in contract end to end: docs/environments.md's example, built and installed as a package of its own,
listed by `agentrl envs` beside a plug-in that fails to load, and trained through the real CLI.

The example's files are read from the docs (each block starts with `# file: <path>`), so the documented plug-in
is the tested one. It is installed with pip into a folder of its own (`--target`) that only the CLI subprocesses
see on their path: the shared virtual environment is left as it was.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BLOCK = re.compile(r"```(?:toml|python|yaml)\n# file: (\S+)\n(.*?)```", re.S)
GUESS_BLOCK = re.compile(r"```(?:toml|python|yaml)\n# file \(guess\): (\S+)\n(.*?)```", re.S)

BROKEN_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "agentrl-broken-plugin"
version = "0.1.0"

[project.entry-points."agentrl.envs"]
broken = "agentrl_broken_plugin_is_not_here:SPEC"

[tool.setuptools]
packages = []
"""


def example_files() -> dict[str, str]:
    """The example plug-in's files, as docs/environments.md prints them."""
    text = (REPO / "docs" / "environments.md").read_text()
    files = {path: body for path, body in BLOCK.findall(text)}
    assert set(files) == {
        "pyproject.toml",
        "agentrl_lights/__init__.py",
        "agentrl_lights/env.py",
        "agentrl_lights/conf/env/lights.yaml",
    }, sorted(files)
    return files


def guess_files() -> dict[str, str]:
    """The second example (`guess`, not a household-like game), as docs/environments.md prints it."""
    files = dict(GUESS_BLOCK.findall((REPO / "docs" / "environments.md").read_text()))
    assert set(files) == {
        "pyproject.toml",
        "agentrl_guess/__init__.py",
        "agentrl_guess/env.py",
        "agentrl_guess/conf/env/guess.yaml",
    }, sorted(files)
    return files


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return root


def pip_install(package: Path, target: Path) -> None:
    """pip's ordinary install of a source folder (a wheel built with setuptools), into `target`."""
    # Without build isolation where setuptools is here (no download); a venv without it gets it from the registry.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", *isolation, "--quiet"]
        + ["--target", str(target), str(package)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder where the example plug-in and a broken one are installed."""
    root = tmp_path_factory.mktemp("plugins")
    target = root / "site"
    pip_install(write_package(root / "agentrl-lights", example_files()), target)
    pip_install(write_package(root / "agentrl-guess", guess_files()), target)
    pip_install(write_package(root / "agentrl-broken-plugin", {"pyproject.toml": BROKEN_PYPROJECT}), target)
    return target


def with_plugins(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}


def test_the_example_is_a_working_suite():
    """The example's engine alone: a won episode, the anchor is the lamp state, splits are deterministic."""
    files = example_files()
    namespace: dict = {}
    exec(compile(files["agentrl_lights/env.py"], "agentrl_lights/env.py", "exec"), namespace)
    suite = namespace["LightsSuite"](lamps=3, max_steps=6)
    task = suite.task("train", 0)
    assert task == suite.task("train", 0) and task.task_type == "one_off"
    assert len(suite.task("eval_out_of_distribution", 0).payload["lamps"]) == 5
    env = suite.make_env()
    obs = env.reset(task)
    assert obs.anchor() == tuple(task.payload["lamps"])
    off = task.payload["lamps"].index(False)
    step = env.step(f"toggle lamp {off + 1}")
    assert step.won and step.done and step.reward == 10.0 and step.action_valid


def test_the_second_example_is_a_game_a_binary_search_wins():
    from agentrl.envs.base import contract_problem

    namespace: dict = {}
    exec(compile(guess_files()["agentrl_guess/env.py"], "agentrl_guess/env.py", "exec"), namespace)
    suite = namespace["GuessSuite"](high=8, max_steps=None)
    assert suite.max_steps == 7  # a binary search over 1..16 (the out-of-distribution range) needs 5, plus two
    for split in ("train", "eval_out_of_distribution"):
        for index in range(10):
            task = suite.task(split, index)
            assert task == suite.task(split, index)
            env = suite.make_env()
            obs = env.reset(task)
            assert contract_problem(obs, "reset") is None
            while True:
                low, high = obs.anchor()
                step = env.step(f"guess {(low + high) // 2}")
                assert contract_problem(step, "step") is None and step.action_valid
                obs = step.observation
                if step.done:
                    break
            assert step.won and step.reward == 10.0
    env = suite.make_env()
    env.reset(suite.task("train", 0))
    wrong = env.step("look")  # any text is taken: not a guess left open is invalid, not an exception
    assert not wrong.action_valid and not wrong.done


def test_the_examples_expert_wins_its_tasks_through_the_collector():
    """The example's optional expert: `agentrl sft`'s demonstrations, played through RL's prompts, win."""
    from agentrl.envs.base import has_expert
    from agentrl.rollout.collector import PromptSpec, collect
    from agentrl.rollout.demonstrations import ExpertPolicy, won_pairs

    namespace: dict = {}
    exec(compile(example_files()["agentrl_lights/env.py"], "agentrl_lights/env.py", "exec"), namespace)
    suite = namespace["LightsSuite"](lamps=4, max_steps=6)
    assert has_expert(suite)
    tasks = [suite.task("train", i) for i in range(6)]
    batch = collect(suite, tasks, 1, ExpertPolicy(suite), PromptSpec("alfworld", 2))  # in process: exec'd classes
    assert all(e.won for e in batch.episodes) and all(batch.admissible)
    assert (
        len(won_pairs(batch)) == len(batch) == sum(lamps.count(False) for lamps in (t.payload["lamps"] for t in tasks))
    )


@pytest.mark.slow
def test_envs_lists_the_plugin_and_reports_the_broken_one_in_a_line(site, run_cli):
    result = run_cli("envs", env={**with_plugins(site), "COLUMNS": "250"})
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert re.search(r"lights\s*│\s*agentrl-lights\s*│\s*yes", out), out
    assert re.search(r"household\s*│\s*built-in\s*│\s*yes", out), out
    broken = [line for line in out.splitlines() if "broken" in line]
    assert len(broken) == 1, out
    assert "plug-in 'broken' (agentrl-broken-plugin" in broken[0] and "ModuleNotFoundError" in broken[0]


@pytest.mark.slow
def test_an_unknown_env_names_the_plugins(site, run_cli):
    result = run_cli("train", "env=nope", env=with_plugins(site))
    assert result.returncode != 0
    assert "lights" in result.stderr


@pytest.mark.slow
def test_env_naming_a_plugin_that_failed_to_load_says_why(site, run_cli):
    result = run_cli("train", "env=broken", env=with_plugins(site))
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: env=broken: plug-in 'broken' (agentrl-broken-plugin"), result.stderr[-2000:]
    assert "failed to load: ModuleNotFoundError" in lines[-1]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_train_and_eval_on_the_plugin_through_the_cli(site, run_cli, tmp_path):
    run_dir = tmp_path / "lights"
    result = run_cli(
        "train",
        "env=lights",
        "+debug=fast",
        "+algo=gigpo",
        "env.lamps=4",
        "model.tiny.demo_turns=200",
        f"hydra.run.dir={run_dir}",
        env=with_plugins(site),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] == 2 and "eval/success" in records[-1]
    # The lamp states are the anchor: the first step of every group shares its state.
    assert records[-1]["gigpo/step_group_singleton_share"] < 1.0
    # A schema key of the plug-in reaches the suite; an unknown key is refused at composition.
    assert "lamps: 4" in (run_dir / ".hydra" / "config.yaml").read_text()
    bad = run_cli("train", "env=lights", "env.lampz=4", env=with_plugins(site))
    assert bad.returncode != 0 and "lampz" in bad.stderr

    evaluated = run_cli(
        "eval",
        "--random",
        "env=lights",
        "eval.split=eval_out_of_distribution",
        "eval.num_tasks=8",
        f"hydra.run.dir={tmp_path / 'random'}",
        env=with_plugins(site),
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    metrics = json.loads((tmp_path / "random" / "eval.json").read_text())["metrics"]
    assert {"eval/one_off/success", "eval/many_off/success"} <= set(metrics)


@pytest.mark.slow
def test_train_on_the_second_example_through_the_cli(site, run_cli, tmp_path):
    run_dir = tmp_path / "guess"
    result = run_cli(
        "train",
        "env=guess",
        "+debug=fast",
        "env.high=16",
        "model.tiny.demo_turns=200",
        f"hydra.run.dir={run_dir}",
        env=with_plugins(site),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] == 2 and "eval/success" in records[-1]
    assert "high: 16" in (run_dir / ".hydra" / "config.yaml").read_text()
    sft = run_cli("sft", "env=guess", "+debug=fast", f"hydra.run.dir={tmp_path / 'sft'}", env=with_plugins(site))
    assert sft.returncode != 0 and "expert" in sft.stderr.splitlines()[-1]
