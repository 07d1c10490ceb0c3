"""`agentrl sft`: behaviour cloning from the environment's expert, end to end on the tiny model, and its errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from agentrl.errors import UserError
from tests.conftest import tiny_model_folder

# A short clone of household's expert on the +debug=fast tiny model (30 warm-up steps on random play): 24 expert
# episodes on easy tasks (about 100 pairs), 3 passes at the tiny model's own warm-up rate (conf/sft_model/tiny.yaml).
SFT = [
    "sft",
    "+debug=fast",
    "env.level=easy",
    "sft.episodes=24",
    "sft.epochs=3",
    "sft.batch_size=16",
    "eval.num_tasks=8",
]


def test_an_environment_without_an_expert_is_one_line():
    from agentrl.envs.household import HouseholdSuite
    from agentrl.train.sft import require_expert

    class NoExpert:  # a suite of the contract, without the optional expert_plan
        def __init__(self):
            self.inner = HouseholdSuite(level="easy")
            self.name, self.splits, self.eval_split = "lights", self.inner.splits, self.inner.eval_split

        def task(self, split, index):
            return self.inner.task(split, index)

    require_expert(HouseholdSuite(level="easy"), "household")
    with pytest.raises(UserError, match=r"env=lights has no expert for agentrl sft: .*expert_plan"):
        require_expert(NoExpert(), "lights")


def test_an_expert_that_wins_nothing_is_one_line():
    from agentrl.config.envs import HouseholdEnvConfig
    from agentrl.config.sft import SftConfig, SftRunConfig
    from agentrl.envs.household import HouseholdSuite
    from agentrl.train.sft import expert_demonstrations

    class Lost(HouseholdSuite):
        def expert_plan(self, task):
            return []

    cfg = SftRunConfig(env=HouseholdEnvConfig(level="easy", prompt_template="compact"), sft=SftConfig(episodes=3))
    pairs, expert = expert_demonstrations(HouseholdSuite(level="easy"), cfg)
    assert expert == {"expert_episodes": 3, "expert_success": 1.0} and len(pairs) >= 3
    with pytest.raises(UserError, match="won none of its 3 episodes"):
        expert_demonstrations(Lost(level="easy"), cfg)


def test_random_play_is_mixed_in_from_the_tasks_after_the_experts():
    from agentrl.config.envs import HouseholdEnvConfig
    from agentrl.config.sft import SftConfig, SftRunConfig
    from agentrl.envs.household import HouseholdSuite
    from agentrl.rollout.parsing import parse_action
    from agentrl.train.sft import expert_demonstrations, random_demonstrations

    suite = HouseholdSuite(level="default")
    cfg = SftRunConfig(
        seed=0,
        env=HouseholdEnvConfig(level="default", prompt_template="compact", max_steps=6),
        sft=SftConfig(episodes=2, random_episodes=3),
    )
    expert, _ = expert_demonstrations(suite, cfg)
    played = random_demonstrations(suite, cfg)
    # every turn of every random episode (won or not: a random policy rarely wins), none of the expert's tasks
    assert 3 <= len(played) <= 3 * 6
    assert not {p for p, _ in played} & {p for p, _ in expert}
    assert all(parse_action(reply).valid for _, reply in played)
    assert len({reply for _, reply in played}) > 1  # random, not one reply learned by heart
    assert random_demonstrations(suite, replace(cfg, sft=replace(cfg.sft, random_episodes=0))) == []
    only_random = replace(cfg, sft=replace(cfg.sft, episodes=0))
    assert expert_demonstrations(suite, only_random)[0] == []
    assert expert[0][0] in {p for p, _ in random_demonstrations(suite, only_random)}  # from sft.first_task on


@pytest.mark.parametrize(
    "override,message",
    [
        ("hardware=cpu_ddp", "agentrl sft runs in one process"),
        ("sft.epoch=2", "unknown config key 'sft.epoch'; did you mean sft.epochs"),
        ("sft.learning_rate=0", "sft.learning_rate must be > 0"),
        ("sft.episodes=0", "sft.episodes and sft.random_episodes are both 0"),
        ("sft.random_episodes=-1", "sft.random_episodes must be >= 0"),
    ],
)
def test_bad_input_is_one_line(run_cli, tmp_path, override, message):
    result = run_cli("sft", override, f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_an_output_folder_that_is_not_empty_is_refused(run_cli, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "config.json").write_text("{}")
    result = run_cli("sft", f"sft.output={taken}", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode != 0 and "is not an empty folder" in result.stderr and "Traceback" not in result.stderr


def expert_logprob(folder: Path, env_level: str = "easy", tasks: int = 8) -> float:
    """Mean log-probability per token of household's expert replies on held-out tasks, under RL's prompts."""

    from agentrl.config.envs import HouseholdEnvConfig
    from agentrl.envs.household import HouseholdSuite
    from agentrl.models.fine_tune import reply_log_probs
    from agentrl.models.load import load_model, load_tokenizer
    from agentrl.rollout.demonstrations import ExpertPolicy, play, won_pairs

    suite = HouseholdSuite(level=env_level)
    env_cfg = HouseholdEnvConfig(level=env_level, prompt_template="compact")
    held_out = [suite.task(suite.eval_split, i) for i in range(tasks)]
    pairs = won_pairs(play(suite, env_cfg, ExpertPolicy(suite), held_out, "test"))
    tokens = [
        t for reply in reply_log_probs(load_model(str(folder)), load_tokenizer(str(folder)), pairs, 2048) for t in reply
    ]
    return sum(tokens) / len(tokens)


@pytest.mark.slow
def test_sft_clones_the_expert_and_train_starts_from_its_folder(run_cli, tmp_path, cache_dir):
    from transformers import AutoModelForCausalLM

    run = tmp_path / "sft"
    result = run_cli(*SFT, f"hydra.run.dir={run}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "before sft" in result.stdout and "after sft" in result.stdout
    results = json.loads((run / "sft.json").read_text())
    assert results["expert_success"] == 1.0 and results["pairs"] >= 24
    assert results["losses"][-1] < results["losses"][0]
    assert "eval/success" in results["before"] and "eval/success" in results["after"]

    out = run / "model"
    assert Path(results["model"]) == out
    assert type(AutoModelForCausalLM.from_pretrained(out)).__name__ == "Qwen2ForCausalLM"
    # the expert's actions on held-out tasks are much likelier after cloning than in the model it started from
    tiny = tiny_model_folder(cache_dir, "+debug=fast", "env.level=easy")
    before, after = expert_logprob(tiny), expert_logprob(out)
    # measured: -0.97 -> -0.46 nats per reply token; an SFT that did not train would leave it where it was
    assert after > before + 0.25, (before, after)

    # RL starts from the folder
    rl = tmp_path / "rl"
    trained = run_cli(
        "train",
        "+debug=fast",
        "env.level=easy",
        f"model.path={out}",
        "trainer.iterations=1",
        "logger=none",
        f"hydra.run.dir={rl}",
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (rl / "checkpoints" / "last" / "config.json").is_file()


@pytest.mark.slow
def test_sft_with_lora_writes_plain_merged_weights(run_cli, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    result = run_cli(
        *SFT,
        "sft.epochs=1",
        "sft.eval_before=false",
        "sft.learning_rate=1e-2",
        "model.lora.enabled=true",
        "model.lora.rank=4",
        f"sft.output={out}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in name for name, _ in model.named_parameters())
    results = json.loads((tmp_path / "run" / "sft.json").read_text())
    assert results["before"] == {} and "eval/success" in results["after"]
