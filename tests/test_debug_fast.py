"""+debug=fast on ALFWorld adds its own small settings (conf/debug_env/fast_alfworld.yaml), and nothing else."""

from __future__ import annotations

from hydra import compose

from agentrl.config.typed import typed
from agentrl.models.tiny import demonstration_turns


def test_debug_fast_on_alfworld_takes_a_small_pool_and_a_short_warm_up(hydra_conf):
    cfg = typed(compose(config_name="train", overrides=["+debug=fast", "env=alfworld"]))
    assert cfg.env.generated_per_type == 1 and cfg.env.max_steps == 10 and cfg.model.tiny.demo_turns == 200
    assert cfg.model.tiny.warmup_batch_size == 8
    assert cfg.trainer.iterations == 2  # debug/fast.yaml itself still applies


def test_the_command_line_still_wins_over_it(hydra_conf):
    cfg = typed(
        compose(
            config_name="train",
            overrides=["+debug=fast", "env=alfworld", "env.generated_per_type=3", "model.tiny.demo_turns=100"],
        )
    )
    assert cfg.env.generated_per_type == 3 and cfg.model.tiny.demo_turns == 100


def test_without_debug_fast_or_on_another_env_nothing_changes(hydra_conf):
    full = typed(compose(config_name="train", overrides=["env=alfworld"]))
    assert full.env.generated_per_type == 10 and full.env.max_steps == 50
    assert demonstration_turns(full.model.tiny, "alfworld") == 4000
    household = typed(compose(config_name="train", overrides=["+debug=fast"]))
    # the household debug model plays the demonstrations it did (30 warm-up steps of 32 rows take fewer than 4000)
    assert (
        demonstration_turns(household.model.tiny, "household") == 4000 and household.model.tiny.warmup_batch_size == 32
    )


def test_debug_fast_on_scienceworld_takes_short_episodes_and_a_short_warm_up(hydra_conf):
    cfg = typed(compose(config_name="train", overrides=["+debug=fast", "env=scienceworld"]))
    assert cfg.env.max_steps == 10 and cfg.model.tiny.demo_turns == 200 and cfg.trainer.iterations == 2
    full = typed(compose(config_name="train", overrides=["env=scienceworld"]))
    assert full.env.max_steps == 30 and demonstration_turns(full.model.tiny, "scienceworld") == 4000
