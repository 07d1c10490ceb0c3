"""Rollouts ahead of the update (rollout.max_staleness): the worker's schedule, failures, checkpoint state and
sampling stream, and two runs of one seed at K=1 logging the same metrics."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from agentrl.rollout.batch import StepBatch
from agentrl.train.async_rollout import (
    MAX_REBUILDS,
    RolloutJob,
    RolloutWorker,
    job_generator,
    trained_version,
    weights_snapshot,
)
from tests.conftest import cli_env, records_by_iteration


def test_iteration_t_trains_on_version_t_minus_1_minus_k():
    assert [trained_version(t, 0) for t in range(1, 6)] == [0, 1, 2, 3, 4]
    assert [trained_version(t, 1) for t in range(1, 6)] == [0, 0, 1, 2, 3]
    assert [trained_version(t, 2) for t in range(1, 6)] == [0, 0, 0, 1, 2]


def test_a_job_stream_depends_on_the_seed_and_iteration_alone():
    a = torch.rand(4, generator=job_generator(3, 7))
    torch.rand(100)  # the global stream moving changes nothing
    assert torch.equal(a, torch.rand(4, generator=job_generator(3, 7)))
    assert not torch.equal(a, torch.rand(4, generator=job_generator(3, 8)))
    assert not torch.equal(a, torch.rand(4, generator=job_generator(4, 7)))


def _model():
    return torch.nn.Linear(2, 1, bias=False)


def _job(iteration: int, value: float) -> RolloutJob:
    return RolloutJob(iteration, iteration - 1, tasks=[], weights={"weight": torch.full((1, 2), value)})


def _rows_from_weight(model, job) -> StepBatch:
    """A fake rollout: one row whose reward is the weight the worker's model holds for the job."""
    return StepBatch(reward=[float(model.weight.detach().sum())])


def test_the_worker_generates_each_job_on_its_own_weights():
    worker = RolloutWorker(_model, _rows_from_weight)
    try:
        for iteration, value in ((1, 1.0), (2, 2.0), (3, 5.0)):
            worker.submit(_job(iteration, value))
        assert worker.submitted_through() == 3
        assert [worker.take(i).batch.reward for i in (1, 2, 3)] == [[2.0], [4.0], [10.0]]
        assert worker.jobs == {}
    finally:
        worker.close()


def test_a_failing_worker_is_rebuilt_and_generates_the_job_again(caplog):
    failures = {"left": 2}

    def flaky(model, job):
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("the engine went away")
        return _rows_from_weight(model, job)

    worker = RolloutWorker(_model, flaky)
    try:
        worker.submit(_job(1, 1.5))
        assert worker.take(1).batch.reward == [3.0]
        assert worker.rebuilds == 2
        assert "rebuilt, it generates it again" in caplog.text
    finally:
        worker.close()


def test_a_job_that_keeps_failing_stops_the_run():
    def broken(model, job):
        raise ValueError("always")

    worker = RolloutWorker(_model, broken)
    try:
        worker.submit(_job(1, 1.0))
        with pytest.raises(RuntimeError, match=f"failed {MAX_REBUILDS + 1} times on iteration 1"):
            worker.take(1)
    finally:
        worker.close()


def test_a_shared_engine_is_held_from_each_loads_start_to_the_jobs_last_row():
    """The vLLM worker's arrangement: the engine is shared, so the worker holds its lock from loading a job's weights
    to the job's rows, and a job generated again after a failure loads its weights again first."""
    events = []
    engine = {"weights": None, "held": False}

    @contextlib.contextmanager
    def hold():
        engine["held"] = True
        events.append("hold")
        try:
            yield
        finally:
            engine["held"] = False
            events.append("release")

    def load(model, weights):
        assert engine["held"]
        engine["weights"] = float(weights["weight"].sum())
        events.append(("load", engine["weights"]))

    failures = {"left": 1}

    def generate(model, job):
        assert engine["held"] and model is engine
        if failures["left"]:
            failures["left"] -= 1
            engine["weights"] = None  # the failure left the engine in any state
            raise OSError("the engine went away")
        return StepBatch(reward=[engine["weights"]])

    worker = RolloutWorker(lambda: engine, generate, load=load, hold=hold)
    try:
        worker.submit(_job(1, 1.0))
        worker.submit(_job(2, 2.0))
        assert [worker.take(i).batch.reward for i in (1, 2)] == [[2.0], [4.0]]
        assert worker.rebuilds == 1
    finally:
        worker.close()
    # three holds, each a load then its rows; job 1 failed (the engine's weights dropped) and was loaded again
    assert [events[i::3] for i in (0, 2)] == [["hold"] * 3, ["release"] * 3]
    assert sorted(events[1::3]) == [("load", 2.0), ("load", 2.0), ("load", 4.0)]


def test_the_workers_busy_time_leaves_out_its_wait_for_a_shared_engine():
    @contextlib.contextmanager
    def busy_elsewhere():
        time.sleep(0.5)  # the trainer's thread holds the engine (a held-out evaluation)
        yield

    worker = RolloutWorker(_model, _rows_from_weight, hold=busy_elsewhere)
    try:
        worker.submit(_job(1, 1.0))
        assert worker.take(1).busy_s < 0.4
    finally:
        worker.close()


def test_a_checkpoint_keeps_rows_where_done_and_weights_where_not():
    release = threading.Event()

    def slow_after_first(model, job):
        if job.iteration > 1:
            release.wait(30)
        return _rows_from_weight(model, job)

    worker = RolloutWorker(_model, slow_after_first)
    try:
        worker.submit(_job(1, 1.0))
        worker.submit(_job(2, 3.0))
        worker.jobs[1].done.wait(30)
        states = worker.state_for_checkpoint()
        assert [s["iteration"] for s in states] == [1, 2]
        assert states[0]["batch"].reward == [2.0] and states[0]["weights"] is None
        assert states[1]["batch"] is None and torch.equal(states[1]["weights"]["weight"], torch.full((1, 2), 3.0))
        release.set()
    finally:
        worker.close()
    resumed = RolloutWorker(_model, _rows_from_weight)
    try:
        resumed.restore(states)
        assert resumed.take(1).batch.reward == [2.0]  # kept, not generated again
        assert resumed.take(2).batch.reward == [6.0]  # generated again from its weights
    finally:
        resumed.close()


def test_an_abandoned_iteration_drops_the_jobs_it_submitted():
    release = threading.Event()
    worker = RolloutWorker(_model, lambda model, job: release.wait(30) and _rows_from_weight(model, job))
    try:
        for iteration in (1, 2, 3):
            worker.submit(_job(iteration, 1.0))
        worker.drop_after(1)
        assert sorted(worker.jobs) == [1] and worker.submitted_through() == 1
        release.set()
    finally:
        worker.close()


def test_a_weights_snapshot_is_a_copy():
    model = _model()
    snapshot = weights_snapshot(model)
    with torch.no_grad():
        model.weight.add_(1.0)
    assert not torch.equal(snapshot["weight"], model.weight)


@pytest.fixture(scope="module")
def small_lm():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        eos_token_id=3,
        pad_token_id=0,
    )
    return Qwen2ForCausalLM(config).eval()


def _generate(model, ids, spec, generator):
    from agentrl.rollout.policies import generate_with_logprobs

    return generate_with_logprobs(model, ids, torch.ones_like(ids), spec, [3], 0, generator=generator)


def test_sampling_from_a_generator_repeats_and_leaves_the_global_streams_alone(small_lm):
    from agentrl.rollout.policies import SamplingSpec

    ids = torch.tensor([[1, 2, 4, 5], [6, 7, 8, 9]])
    spec = SamplingSpec(temperature=0.7, top_p=0.9, max_new_tokens=6)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    python, numpy = random.getstate(), np.random.get_state()[1].copy()
    first, first_logps = _generate(small_lm, ids, spec, job_generator(0, 1))
    assert torch.equal(torch.get_rng_state(), before)
    assert random.getstate() == python and np.array_equal(np.random.get_state()[1], numpy)
    torch.rand(10)
    again, again_logps = _generate(small_lm, ids, spec, job_generator(0, 1))
    assert torch.equal(first, again) and torch.equal(first_logps, again_logps)
    other, _ = _generate(small_lm, ids, spec, job_generator(0, 2))
    assert not torch.equal(first, other)


def test_a_generator_samples_from_the_warped_distribution_and_records_its_log_probs(small_lm):
    from agentrl.rollout.policies import SamplingSpec

    draws = 4000
    ids = torch.tensor([[1, 2, 4, 5]]).repeat(draws, 1)
    spec = SamplingSpec(temperature=0.5, max_new_tokens=1)
    tokens, logps = _generate(small_lm, ids, spec, job_generator(1, 1))
    with torch.no_grad():
        probs = (small_lm(ids[:1]).logits[0, -1] / 0.5).softmax(-1)
    counts = torch.bincount(tokens[:, 0], minlength=probs.numel()).double()
    expected = probs.double() * draws
    likely = expected > 50
    assert likely.any()
    sigma = (expected[likely] * (1 - probs.double()[likely])).sqrt()
    assert ((counts[likely] - expected[likely]).abs() < 5 * sigma).all()
    assert torch.allclose(logps[:, 0], probs.log()[tokens[:, 0]], atol=1e-5)


@pytest.mark.slow
def test_two_runs_of_one_seed_at_staleness_1_log_the_same_metrics(cache_dir, tmp_path):
    env = cli_env(cache_dir)
    runs = []
    for name in ("first", "second"):
        folder = tmp_path / name
        command = [
            sys.executable, "-m", "agentrl.cli", "train", "+debug=fast", "trainer.iterations=4",
            "trainer.tasks_per_iteration=4", "rollout.max_staleness=1", "logger=none", f"hydra.run.dir={folder}",
        ]  # fmt: skip
        done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(records_by_iteration(folder))
    assert runs[0] == runs[1]
    assert [runs[0][i]["async/staleness"] for i in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]
    assert runs[0][4]["async/policy_version"] == 2.0
    assert "off_policy/weight_mean" in runs[0][2]


@pytest.mark.parametrize(
    ("rollout", "hardware", "says"),
    [
        ({"backend": "vllm", "mode": "server"}, {}, "NCCL on CUDA .* rollout.vllm.mode=server is not supported"),
        ({"backend": "vllm", "enable_sleep_mode": True}, {}, "enable_sleep_mode=true is not supported with it"),
        ({}, {"num_processes": 2}, "hardware.num_processes=2 is not supported with it yet"),
        ({"backend": "vllm"}, {"num_processes": 2}, "hardware.num_processes=2 is not supported with it yet"),
    ],
)
def test_what_staleness_does_not_run_with_is_refused_in_one_line(rollout, hardware, says):
    from agentrl.config.staleness import check_max_staleness
    from agentrl.errors import UserError

    def config(max_staleness):
        return _rollout(max_staleness, **rollout), SimpleNamespace(num_processes=hardware.get("num_processes", 1))

    with pytest.raises(UserError, match=says) as err:
        check_max_staleness(*config(1))
    assert "\n" not in str(err.value)
    check_max_staleness(*config(0))


def _rollout(max_staleness, backend="hf", mode="colocate", enable_sleep_mode=False):
    from agentrl.config.values import Backend, VllmMode

    vllm = SimpleNamespace(mode=VllmMode(mode), enable_sleep_mode=enable_sleep_mode)
    return SimpleNamespace(max_staleness=max_staleness, backend=Backend(backend), vllm=vllm)


def test_staleness_runs_with_hf_and_with_a_colocated_vllm_engine_on_one_rank():
    from agentrl.config.staleness import check_max_staleness

    for backend in ("hf", "vllm"):
        check_max_staleness(_rollout(2, backend), SimpleNamespace(num_processes=1))


def test_an_unreadable_jobs_file_is_one_line(tmp_path):
    from agentrl.errors import UserError
    from agentrl.train.async_hooks import AsyncRolloutHooks
    from agentrl.train.async_rollout import ASYNC_ROLLOUTS

    (tmp_path / ASYNC_ROLLOUTS).write_bytes(b"not a torch file")
    with pytest.raises(UserError, match=f"{ASYNC_ROLLOUTS} cannot be read") as err:
        AsyncRolloutHooks().load_async_rollouts(tmp_path)
    assert "\n" not in str(err.value)


def test_a_resume_on_another_backend_is_refused_while_a_job_waits_for_its_weights():
    """A job's weights are named for the backend that saved it (HF: the module's state dict; vLLM: the engine's names,
    LoRA merged); jobs whose rows exist need none."""
    from agentrl.errors import UserError
    from agentrl.train.async_hooks import AsyncRolloutHooks

    hooks = AsyncRolloutHooks()
    hooks.use_vllm = False
    pending = {"iteration": 3, "batch": None, "weights": {}, "engine": "vllm"}
    with pytest.raises(UserError, match="weights for rollout.backend=vllm, which rollout.backend=hf cannot") as err:
        hooks._check_resumed_engine([pending])
    assert "\n" not in str(err.value)
    hooks._check_resumed_engine([{**pending, "batch": StepBatch(reward=[1.0])}])
    hooks.use_vllm = True
    hooks._check_resumed_engine([pending])
    older = {key: value for key, value in pending.items() if key != "engine"}  # written before vLLM ran ahead: HF's
    with pytest.raises(UserError, match="weights for rollout.backend=hf, which rollout.backend=vllm cannot"):
        hooks._check_resumed_engine([older])


def test_a_resume_that_changes_the_staleness_is_refused(tmp_path):
    from omegaconf import OmegaConf

    from agentrl.run_folder import changed_meaning

    recorded = tmp_path / "config.yaml"
    recorded.write_text(OmegaConf.to_yaml({"rollout": {"max_staleness": 1}, "env": {"step_latency_s": 0.0}}))
    assert changed_meaning(recorded, {"rollout": {"max_staleness": 0}, "env": {"step_latency_s": 0.0}}) == [
        "rollout.max_staleness: 1 -> 0"
    ]
    assert changed_meaning(recorded, {"rollout": {"max_staleness": 1}, "env": {"step_latency_s": 0.5}}) == []
