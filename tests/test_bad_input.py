"""Bad input, through the real CLI: one line on stderr, a non-zero exit, no traceback, nothing written over.

Each case is a user mistake the issue lists; the cases that need an optional extra skip with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.extras import skip_without, vllm_installed

pytestmark = pytest.mark.slow


def _corrupt_checkpoint(tmp: Path) -> str:
    folder = tmp / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{ not json")
    (folder / "model.safetensors").write_bytes(b"\x00garbage")
    return str(folder)


def _empty_alfworld_data(tmp: Path) -> str:
    (tmp / "alf" / "json_2.1.1" / "train").mkdir(parents=True)
    return str(tmp / "alf")


def _unwritable(tmp: Path) -> str:
    blocker = tmp / "a-file"
    blocker.write_text("")
    return str(blocker / "run")  # a folder inside a file cannot be made


CASES = {
    "unknown group option": (lambda t: ["train", "env=nowhere"], "available: alfworld, gem, gym, household"),
    "gym factory that does not import": (
        lambda t: ["train", "env=gym", "env.factory=no_such_module:make_env"],
        "env.factory='no_such_module:make_env': module 'no_such_module' does not import",
    ),
    "gym factory missing": (lambda t: ["train", "env=gym"], "env.factory"),
    "misspelled key": (lambda t: ["train", "trainer.iteratons=5"], "did you mean trainer.iterations"),
    "wrong type": (lambda t: ["train", "trainer.iterations=abc"], "trainer.iterations"),
    "non-positive group size": (lambda t: ["train", "trainer.group_size=0"], "trainer.group_size must be >= 1"),
    "group size of 1": (lambda t: ["train", "trainer.group_size=1"], "nothing to compare"),
    "missing checkpoint": (lambda t: ["eval", str(t / "nowhere")], "does not exist"),
    "corrupt checkpoint": (lambda t: ["eval", _corrupt_checkpoint(t)], "cannot load the model in"),
    "missing resume checkpoint": (lambda t: ["train", f"trainer.resume={t / 'nowhere'}"], "no such checkpoint"),
    "model neither local nor reachable": (
        lambda t: ["train", "model=qwen2.5-0.5b-instruct", "logger=none"],
        "model.path",
    ),
    "malformed ALFWorld data folder": (
        lambda t: ["train", "env=alfworld", f"env.data_dir={_empty_alfworld_data(t)}", "logger=none"],
        "alfworld",
    ),
    "unwritable output folder": (
        lambda t: ["train", f"hydra.run.dir={_unwritable(t)}", "logger=none"],
        "cannot be made",
    ),
    "eval split that does not exist": (lambda t: ["train", "eval.split=nope", "logger=none"], "nope"),
    "setting that cannot apply": (lambda t: ["train", "algo.replay.capacity=3"], "has no effect"),
    "vLLM requested but not installed": (lambda t: ["train", "rollout.backend=vllm"], "pip install 'agentrl[vllm]'"),
    "no training process": (
        lambda t: ["train", "hardware.num_processes=0"],
        "hardware.num_processes must be >= 1",
    ),
    "mini-batch not shared evenly by the ranks": (
        lambda t: ["train", "hardware=cpu_ddp", "trainer.mini_batch_size=5"],
        "trainer.mini_batch_size must be a positive multiple of hardware.num_processes=2",
    ),
    "no epochs": (lambda t: ["train", "trainer.epochs=0"], "trainer.epochs must be >= 1"),
    "dual clip that cannot cap": (lambda t: ["train", "algo.dual_clip=1"], "algo.dual_clip"),
    "negative KL clamp": (lambda t: ["train", "algo.kl_clamp=-1"], "algo.kl_clamp must be > 0 or null"),
    "run path split at a space by the shell": (
        lambda t: ["train", f"hydra.run.dir={t}/my", "run"],
        "quote the whole override: 'hydra.run.dir=",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_a_non_zero_exit(case, run_cli, tmp_path):
    if case == "malformed ALFWorld data folder":
        skip_without("alfworld", "alfworld")
    if case == "vLLM requested but not installed" and vllm_installed():
        pytest.skip("vLLM is installed here, so asking for it is not a mistake")
    make_args, expected = CASES[case]
    result = run_cli(*make_args(tmp_path), timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0
    assert "Traceback" not in result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert expected.lower() in lines[0].lower()


@pytest.mark.parametrize("where", ["a file", "a folder inside a file"])
def test_a_cache_that_cannot_be_written_is_one_line(where, run_cli, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cache = blocker if where == "a file" else blocker / "cache"
    result = run_cli("train", "+debug=fast", "logger=none", env={"AGENTRL_CACHE": str(cache)}, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0 and "Traceback" not in result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: cannot write agentrl's cache folder"), result.stderr[-2000:]
    assert "AGENTRL_CACHE" in lines[0] and blocker.read_text() == ""


@pytest.mark.parametrize("threshold", ["nan", "inf", "-inf"])
def test_report_threshold_that_is_not_a_number_is_one_line(threshold, run_cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"iteration": 0, "eval/success": 0.1}\n')
    result = run_cli("report", str(run), "--threshold", threshold)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0 and "Traceback" not in result.stdout + result.stderr
    assert len(lines) == 1 and "--threshold must be a finite number" in lines[0], result.stderr[-2000:]
    assert not (run / "report.png").exists() and not (run / "report.json").exists()  # nothing half-written
