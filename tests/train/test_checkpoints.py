"""Which checkpoint a resume uses: complete ones only, newest first, with one line for each one skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from agentrl.checkpoints import REQUIRED, latest_complete, problem, resume_checkpoint
from agentrl.errors import UserError


def make_checkpoint(root: Path, step: int) -> Path:
    folder = root / "checkpoints" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    for name in (*(names[0] for names in REQUIRED), "config.json"):
        if name.endswith(".json"):
            (folder / name).write_text(json.dumps({"iteration": step}))
        else:
            (folder / name).write_bytes(b"torch state")
    return folder


def test_an_fsdp_checkpoint_with_its_gathered_optimizer_state_is_complete(tmp_path):
    folder = make_checkpoint(tmp_path, 2)
    (folder / "optimizer.pt").rename(folder / "optimizer.bin")  # accelerate's name on its FSDP path
    assert problem(folder) is None
    (folder / "optimizer.bin").unlink()
    assert problem(folder) == "missing optimizer.pt or optimizer.bin"


def test_a_lora_checkpoint_needs_its_adapter_config(tmp_path):
    folder = make_checkpoint(tmp_path, 2)
    (folder / "config.json").unlink()
    assert "missing config.json or adapter_config.json" in problem(folder)
    (folder / "adapter_config.json").write_text("{}")
    assert problem(folder) is None


def test_a_complete_checkpoint_has_no_problem(tmp_path):
    assert problem(make_checkpoint(tmp_path, 2)) is None


def test_partial_and_corrupt_checkpoints_are_skipped_for_the_previous_one(tmp_path, capsys):
    good = make_checkpoint(tmp_path, 2)
    partial = make_checkpoint(tmp_path, 4)
    (partial / "agentrl_state.json").unlink()  # killed mid-save: the last file never landed
    corrupt = make_checkpoint(tmp_path, 6)
    (corrupt / "model.safetensors").write_bytes(b"\x00garbage")
    assert latest_complete(tmp_path / "checkpoints") == good
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("skipping checkpoint")]
    assert (
        len(lines) == 2
        and "checkpoint-6: unreadable" in lines[0]
        and "checkpoint-4: missing agentrl_state.json" in lines[1]
    )


def test_resume_auto_without_checkpoints_starts_fresh(tmp_path, capsys):
    assert resume_checkpoint("auto", tmp_path) is None
    assert "starting from the beginning" in capsys.readouterr().out
    assert resume_checkpoint(None, tmp_path) is None


def test_resume_from_a_run_folder_or_a_checkpoint(tmp_path):
    make_checkpoint(tmp_path, 2)
    newest = make_checkpoint(tmp_path, 10)  # numeric order, not text order
    assert resume_checkpoint(str(tmp_path), tmp_path / "elsewhere") == newest
    assert resume_checkpoint(str(newest), tmp_path / "elsewhere") == newest.resolve()


@pytest.mark.parametrize(
    "break_it, expected",
    [
        (lambda root: root / "missing", "no such checkpoint or run folder"),
        (
            lambda root: (make_checkpoint(root, 3) / "optimizer.pt").unlink() or root / "checkpoints" / "checkpoint-3",
            "cannot be resumed from: missing optimizer.pt",
        ),
        (lambda root: (root / "empty").mkdir() or root / "empty", "no complete checkpoint under it"),
    ],
)
def test_a_bad_resume_path_is_one_line(tmp_path, break_it, expected):
    with pytest.raises(UserError) as err:
        resume_checkpoint(str(break_it(tmp_path)), tmp_path)
    assert expected in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_checkpoints_land_whole_and_keep_last_bounds_them(run_cli, tmp_path):
    run_dir = tmp_path / "r"
    result = run_cli(
        "train",
        "+debug=fast",
        "trainer.iterations=4",
        "trainer.save_every=1",
        "trainer.keep_last=2",
        "trainer.eval_every=0",
        "logger=none",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    root = run_dir / "checkpoints"
    assert sorted(p.name for p in root.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]
    assert not (root / ".staging").exists() or not any((root / ".staging").iterdir())
    assert (root / "last").resolve() == (root / "checkpoint-4").resolve()
    assert all(problem(root / name) is None for name in ("checkpoint-3", "checkpoint-4"))
    # Weights are safetensors, never pickles (transformers' training_args.bin is written but never read back).
    assert not list(root.rglob("pytorch_model*.bin")) and list(root.glob("checkpoint-4/*.safetensors"))
