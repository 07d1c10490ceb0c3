"""+debug=fast on ALFWorld adds its own small settings (conf/debug_env/fast_alfworld.yaml), and nothing else; its
settings for the tiny model come only with model=tiny (conf/debug_model/), so it composes with any model=."""

from __future__ import annotations

import pytest
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


def test_debug_fast_composes_with_a_pretrained_model():
    """+debug=fast's tiny-model settings (debug_model/fast_tiny.yaml) come only with model=tiny: with another
    model= the run is short, and no tiny node appears beside the pretrained model."""
    from agentrl.cli.launch import preflight

    for model in ("smollm2-135m-instruct", "qwen2.5-0.5b-instruct"):
        for command in ("train", "sft"):
            cfg = preflight(command, ["+debug=fast", f"model={model}"])
            assert cfg.model.name == model and cfg.model.tiny is None and cfg.trainer.iterations == 2
    on_alfworld = preflight("train", ["+debug=fast", "model=smollm2-135m-instruct", "env=alfworld"])
    assert on_alfworld.model.tiny is None and on_alfworld.env.max_steps == 10  # debug_env/ still applies
    recipe = preflight("train", ["+experiment=smollm2_household", "+debug=fast"])
    assert recipe.model.registry == "smollm2-135m-instruct" and recipe.trainer.iterations == 2


def test_debug_fast_still_shortens_the_tiny_models_warm_up():
    from agentrl.cli.launch import preflight

    for command in ("train", "sft"):
        assert preflight(command, ["+debug=fast"]).model.tiny.warmup_steps == 30
        assert preflight(command, []).model.tiny.warmup_steps == 1500


def test_a_tiny_setting_beside_a_pretrained_choice_does_not_name_that_choice_as_the_fix():
    from dataclasses import replace

    from agentrl.cli.launch import preflight
    from agentrl.config.checks import check_tiny_beside_pretrained
    from agentrl.errors import UserError

    tiny = preflight("train", []).model
    chosen = preflight("train", ["model=smollm2-135m-instruct"]).model
    with pytest.raises(UserError) as caught:  # what a recipe with model.tiny.* composed onto model=smollm2 would be
        check_tiny_beside_pretrained(replace(chosen, tiny=tiny.tiny))
    assert str(caught.value) == (
        "model.tiny.* has no effect with model=smollm2-135m-instruct: only the tiny model reads them; drop them, or "
        "use model=tiny"
    )
    with pytest.raises(UserError, match=r"^model.hub_id=Qwen/Qwen2.5-0.5B-Instruct has no effect with model=tiny; "):
        preflight("train", ["model.hub_id=Qwen/Qwen2.5-0.5B-Instruct"])
