"""Fixtures of the in-process trainer tests: the real AgentTrainer on the +debug=fast tiny model, and
hand-made batches in TRL's batch-dict layout."""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager

import pytest
import torch

from agentrl.config.typed import typed
from agentrl.train.trainer import AgentTrainer


@pytest.fixture(scope="module")
def trainer(cache_dir, tmp_path_factory):
    """One trainer per test module; tests that change its weights restore them."""
    with built_trainer(cache_dir, tmp_path_factory.mktemp("loss") / "checkpoints") as built:
        yield built


@pytest.fixture
def restored(trainer):
    """The trainer with its weights and optimizer put back afterwards (the fixture is shared by the module)."""
    weights = copy.deepcopy(trainer.model.state_dict())
    optimizer = trainer.optimizer
    yield trainer
    trainer.model.load_state_dict(weights)
    trainer.optimizer = optimizer


@contextmanager
def built_trainer(cache_dir, output_dir, overrides=()):
    """The real AgentTrainer on the +debug=fast tiny model (built once per session), in training mode, with
    `overrides` on top of `+debug=fast logger=none`; its environment pool is closed afterwards."""
    from hydra import compose

    from agentrl.envs.registry import make_suite
    from agentrl.envs.workers import make_pool
    from agentrl.models.load import load_policy
    from agentrl.tracking import NullTracker
    from agentrl.train.sampler import TaskSampler
    from tests.conftest import hydra_initialized

    saved_cache = os.environ.get("AGENTRL_CACHE")
    os.environ["AGENTRL_CACHE"] = str(cache_dir)  # the session's tiny model (+debug=fast), built once
    with hydra_initialized():
        cfg = typed(compose(config_name="train", overrides=["+debug=fast", "logger=none", *overrides]))
    suite = make_suite(cfg.env)
    model, tokenizer = load_policy(cfg.model, cfg.env, cfg.hardware)
    pool = make_pool(suite.make_env, cfg.env.num_workers, cfg.env.step_timeout_s)
    try:
        trainer = AgentTrainer(
            model=model,
            tokenizer=tokenizer,
            cfg=cfg,
            suite=suite,
            pool=pool,
            sampler=TaskSampler(suite, "train", cfg.seed),
            tracker=NullTracker(),
            evaluator=lambda model, *args, **kwargs: {},
            output_dir=output_dir,
        )
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # what transformers' loop sets: no accumulation
        yield trainer
    finally:
        pool.close()
        if saved_cache is None:
            os.environ.pop("AGENTRL_CACHE", None)
        else:
            os.environ["AGENTRL_CACHE"] = saved_cache


def make_batch(trainer, advantages, completion_lengths, prompt_length=5, seed=0):
    """TRL's batch dict for rows of random tokens: left-padded prompts, right-padded completions."""
    g = torch.Generator().manual_seed(seed)
    vocab = trainer.model.config.vocab_size
    rows, width = len(advantages), max(completion_lengths)
    prompt_ids = torch.randint(5, vocab, (rows, prompt_length), generator=g)
    completion_ids = torch.randint(5, vocab, (rows, width), generator=g)
    completion_mask = torch.zeros(rows, width, dtype=torch.long)
    for i, n in enumerate(completion_lengths):
        completion_mask[i, :n] = 1
    completion_ids = torch.where(completion_mask.bool(), completion_ids, trainer.processing_class.pad_token_id)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones(rows, prompt_length, dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor(advantages, dtype=torch.float32),
        "num_items_in_batch": completion_mask.sum(),
        "num_rows_in_batch": torch.tensor(rows),
        "is_real_row": torch.ones(rows),
    }
