"""A real `agentrl train` on the tiny model, then `agentrl eval` on what it saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, cache_dir):
    """One debug training run shared by the tests of this module."""
    from tests.conftest import agentrl_cli

    run_dir = tmp_path_factory.mktemp("run") / "r"
    result = agentrl_cli(
        cache_dir,
        run_dir.parent,
        "train",
        "+debug=fast",
        "trainer.iterations=3",
        "trainer.save_every=3",
        "eval.seed=7",  # not conf/eval.yaml's: `agentrl eval` must take it from the run
        "logger=wandb",
        "logger.wandb_mode=offline",
        f"hydra.run.dir={run_dir}",
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result


def test_metrics_are_written_per_iteration(trained_run):
    run_dir, _ = trained_run
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1, 2, 3]
    assert "eval/success" in records[0]  # the starting model, before any update
    for r in records[1:]:
        for key in ("train/loss", "train/grad_norm", "rollout/success", "rollout/rows", "time/iteration_s"):
            assert key in r, key
        assert r["rollout/rows"] >= 2 * 2  # B=2 groups of N=2 episodes, at least one turn each
        # the default's GiGPO logs its own figures beside the step-credit diagnostics every estimator logs (that a
        # GRPO run logs the diagnostics but no gigpo/ figures: tests/train/test_credit_logging.py)
        sizes = [r[f"credit/step_group_size_{b}_share"] for b in ("1", "2_4", "5_9", "10_plus")]
        assert sum(sizes) == pytest.approx(1.0)
        assert 0 <= r["credit/step_advantage_nonzero_share"] <= 1 - sizes[0]
        assert "credit/episode_step_advantage_correlation" in r  # null where undefined
        assert r["gigpo/step_group_singleton_share"] == r["credit/step_group_size_1_share"]
    assert "eval/success" in records[-1]
    evaluated = [r for r in records if "eval/success" in r]
    assert all(r["time/eval_s"] > 0 for r in evaluated), "every evaluation logs its wall time"
    assert not any("time/eval_s" in r for r in records if "eval/success" not in r)


def test_every_parameter_changed(trained_run, cache_dir):
    run_dir, _ = trained_run
    # the model this run started from: the session cache holds other tiny models too (other environments',
    # other levels' and sizes'), so it is found by the run's own config, as the run found it
    from omegaconf import OmegaConf

    from agentrl.models.tiny import cache_key

    cfg = OmegaConf.load(run_dir / "config.yaml")
    start = Path(cache_dir) / "tiny" / f"{cfg.env.name}-{cache_key(cfg.model.tiny, cfg.env)}"
    assert (start / "warmup.json").is_file(), start
    before = load_file(str(start / "model.safetensors"))
    after = load_file(str(run_dir / "checkpoints" / "last" / "model.safetensors"))
    assert before.keys() == after.keys()
    unchanged = [name for name in before if (before[name] == after[name]).all()]
    assert unchanged == []


def test_run_folder_describes_itself(trained_run):
    run_dir, _ = trained_run
    info = json.loads((run_dir / "run.json").read_text())
    assert "agentrl train +debug=fast" in info["command"]
    assert {"torch", "transformers", "trl"} <= set(info["packages"])
    assert "git_revision" in info
    assert info["config"]["trainer"]["iterations"] == 3
    assert (run_dir / "config.yaml").is_file()
    assert list((run_dir / "wandb").glob("offline-run-*")), "W&B should log offline into the run folder"
    last = run_dir / "checkpoints" / "last"
    assert last.is_symlink() and (last / "agentrl_state.json").is_file() and (last / "optimizer.pt").is_file()


def test_eval_on_the_saved_checkpoint(trained_run, run_cli, tmp_path):
    run_dir, _ = trained_run
    out = tmp_path / "ev"
    result = run_cli("eval", str(run_dir), "eval.num_tasks=3", "eval.episodes_per_task=2", f"output={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "evaluation protocol" in result.stdout and "split: valid" in result.stdout
    report = json.loads((out / "eval.json").read_text())
    assert report["protocol"]["tasks"] == 3 and report["protocol"]["temperature"] == 0.4
    assert 0.0 <= report["metrics"]["eval/success"] <= 1.0
    assert "eval/pass@2" in report["metrics"]
    trajectories = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(trajectories) == 6 and json.loads(trajectories[0])["turns"]


def test_eval_follows_its_run(trained_run, run_cli, tmp_path):
    """Without eval.* on the command line, `agentrl eval <run>` evaluates as the run did (tasks, seed, ...) and
    scores the last checkpoint exactly as training's final evaluation scored it."""
    run_dir, _ = trained_run
    out = tmp_path / "follow"
    result = run_cli("eval", str(run_dir), "eval.temperature=0.4", f"output={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    protocol = json.loads((out / "eval.json").read_text())["protocol"]
    assert protocol["tasks"] == 4 and protocol["seed"] == 7  # +debug=fast's 4 tasks, the run's seed; not 50, 1234
    assert protocol["sources"]["num_tasks"] == "run" and protocol["sources"]["temperature"] == "command line"
    [sources] = [line for line in result.stdout.splitlines() if "from the training run:" in line]
    assert "from the command line: eval.temperature" in sources
    assert "eval.num_tasks" in sources.split("from the training run:")[1]
    metrics = json.loads((out / "eval.json").read_text())["metrics"]
    final = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    shared = [k for k in metrics if k in final]
    assert {"eval/success", "eval/return", "eval/episode_length", "eval/invalid_rate"} <= set(shared)
    assert {k: final[k] for k in shared} == pytest.approx({k: metrics[k] for k in shared}, abs=1e-9)


def test_tokenizer_round_trips_through_the_checkpoint(trained_run):
    """The checkpoint's tokenizer gives the ids of its own tokenizer.json (not a Qwen2 rebuild of it)."""
    from tokenizers import Tokenizer

    from agentrl.models.load import load_tokenizer

    run_dir, _ = trained_run
    [checkpoint] = list((run_dir / "checkpoints").glob("checkpoint-*"))
    tok = load_tokenizer(str(checkpoint))
    raw = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    for text in ("<action>take apple 1 from countertop 1</action>", "You arrive at fridge 1. The fridge 1 is closed."):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert ids == raw.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
    assert type(tok).__name__ != "Qwen2Tokenizer"


def test_eval_of_a_missing_checkpoint_is_one_line(run_cli, tmp_path):
    result = run_cli("eval", str(tmp_path / "nothing-here"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: checkpoint {tmp_path / 'nothing-here'} does not exist"]


def test_random_baseline_eval(run_cli, tmp_path):
    result = run_cli("eval", "--random", "env.level=easy", "eval.num_tasks=5", f"output={tmp_path / 'rb'}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "random admissible policy" in result.stdout
    assert json.loads((tmp_path / "rb" / "eval.json").read_text())["protocol"]["tasks"] == 5


def test_gigpo_with_replay_and_epo_trains_and_checkpoints_their_state(run_cli, tmp_path):
    """The composed algorithm runs end to end; the replay buffer and entropy history land in the checkpoint."""
    from agentrl.algos.entropy import EntropyRegularizer
    from agentrl.algos.replay import ReplayBuffer

    run_dir = tmp_path / "combo"
    result = run_cli(
        "train",
        "+debug=fast",
        "+algo=gigpo",
        "algo.replay.enabled=true",
        "algo.entropy.mode=epo",
        "trainer.task_pool=2",
        "trainer.iterations=3",
        "trainer.save_every=3",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in records[1:]:
        for key in (
            "gigpo/step_group_singleton_share",
            "credit/step_group_size_1_share",
            "credit/episode_groups_no_signal_share",
            "replay/buffer_episodes",
            "replay/groups_injected",
            "entropy/token_mean",
            "entropy/beta",
            "entropy/smooth_loss",
        ):
            assert key in r, key
    assert records[1]["entropy/h_bar"] is None  # no history before the first update
    assert records[2]["entropy/h_bar"] == pytest.approx(records[1]["entropy/token_mean"])

    state = json.loads((run_dir / "checkpoints" / "last" / "agentrl_state.json").read_text())
    assert state["sampler"]["pool"] is not None and len(state["sampler"]["pool"]) == 2
    entropy = EntropyRegularizer("epo", total_iterations=3)
    entropy.load_state_dict(state["entropy"])
    assert entropy.history == pytest.approx([r["entropy/token_mean"] for r in records[1:]])
    replay = ReplayBuffer(capacity=8)
    replay.load_state_dict(state["replay"])
    assert len(replay) == records[-1]["replay/buffer_episodes"]
