"""The CPU's offer (agentrl/cpu.py) and hardware.precision on a CPU: threads, native bf16, the checks."""

from __future__ import annotations

import os

import pytest
import torch

from agentrl import cpu
from agentrl.cli.launch import preflight
from agentrl.config.checks import check_host
from agentrl.errors import UserError


def test_available_cores_is_within_the_machine():
    assert 1 <= cpu.available_cores() <= (os.cpu_count() or 1)


@pytest.mark.parametrize("text,expected", [("max 100000\n", None), ("150000 100000\n", 2), ("50000 100000", 1)])
def test_the_cgroup_quota_rounds_up_to_whole_cores(tmp_path, monkeypatch, text, expected):
    (tmp_path / "cpu.max").write_text(text)
    monkeypatch.setattr(cpu, "CGROUP_CPU_MAX", tmp_path / "cpu.max")
    assert cpu._cgroup_quota() == expected


def test_a_quota_caps_the_cores(monkeypatch):
    monkeypatch.setattr(cpu, "_cgroup_quota", lambda: 1)
    assert cpu.available_cores() == 1


@pytest.mark.parametrize(
    "flags,native", [("fpu avx2 avx512f", False), ("fpu avx512f avx512_bf16", True), ("fpu amx_bf16 amx_tile", True)]
)
def test_native_bf16_reads_the_cpu_flags(tmp_path, monkeypatch, flags, native):
    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    monkeypatch.setattr(cpu, "CPUINFO", tmp_path / "cpuinfo")
    assert cpu.native_bf16() is native


def test_no_cpuinfo_means_no_native_bf16(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu, "CPUINFO", tmp_path / "missing")
    assert cpu.native_bf16() is False


def test_threads_follow_the_cores_and_their_ranks(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu, "available_cores", lambda: 4)
    try:
        assert cpu.set_torch_threads() == "torch threads: 4 (4 cores available)"
        assert torch.get_num_threads() == 4
        assert cpu.set_torch_threads(ranks_here=2) == "torch threads: 2 (4 cores available, shared by 2 ranks)"
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_omp_num_threads_wins(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    try:
        line = cpu.set_torch_threads()
        assert line.startswith("torch threads: 1 (OMP_NUM_THREADS")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_fp16_on_cpu_is_one_line():
    with pytest.raises(UserError, match=r"^hardware.precision=fp16 needs a GPU; on CPU use fp32 or bf16$"):
        preflight("train", ["hardware.precision=fp16"])


def test_bf16_on_a_cpu_without_the_instructions_is_refused_when_the_run_starts(monkeypatch):
    cfg = preflight("train", ["hardware.precision=bf16"])  # the machine that runs it is asked when the run starts
    monkeypatch.setattr("agentrl.config.checks.native_bf16", lambda: False)
    with pytest.raises(UserError) as err:
        check_host(cfg)
    assert str(err.value) == (
        "hardware.precision=bf16 on CPU needs bf16 instructions (AVX512-BF16 or AMX), which this CPU lacks; "
        "use hardware.precision=fp32"
    )
    monkeypatch.setattr("agentrl.config.checks.native_bf16", lambda: True)
    check_host(cfg)


def test_a_cpu_keeps_fp32_weights_under_bf16():
    from agentrl.models.load import weights_precision

    assert weights_precision("bf16", "cpu") == "fp32"
    assert weights_precision("bf16", "cuda") == "bf16"
    assert weights_precision("fp32", "cpu") == "fp32"


def test_generating_in_bf16_is_refused_where_it_means_nothing():
    assert preflight("train", ["hardware.precision=bf16", "rollout.generate_in_bf16=true"]).rollout.generate_in_bf16
    refusals = {
        "needs hardware.precision=bf16 (got fp32)": ["rollout.generate_in_bf16=true"],
        "has no effect on hardware.device=cuda": [
            "hardware=gpu",
            "rollout.backend=hf",
            "rollout.generate_in_bf16=true",
        ],
        "has no effect with rollout.backend=vllm": [
            "hardware.precision=bf16",
            "rollout.backend=vllm",
            "rollout.generate_in_bf16=true",
        ],
    }
    for message, overrides in refusals.items():
        with pytest.raises(UserError, match=r"^rollout.generate_in_bf16") as err:
            preflight("train", overrides)
        assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "cores,threads,busy,warned",
    [
        (2, 2, 1.6, True),  # a 2-thread job beside another: the README's several-fold slowdown
        (2, 2, 0.1, False),  # an idle machine: the shell's own bursts stay under the margin
        (2, 1, 1.0, False),  # one-thread jobs side by side on as many cores (compare_algorithms) fit
        (8, 8, 1.0, True),
    ],
)
def test_a_crowded_machine_is_said_in_one_line(monkeypatch, cores, threads, busy, warned):
    before = torch.get_num_threads()
    monkeypatch.setattr(cpu, "_cgroup_quota", lambda: None)
    monkeypatch.setattr(cpu, "available_cores", lambda: cores)
    monkeypatch.setattr(cpu, "busy_cores", lambda seconds=0.2: busy)
    torch.set_num_threads(threads)
    try:
        line = cpu.crowded_line()
    finally:
        torch.set_num_threads(before)
    assert (line is not None) is warned
    if warned:
        assert f"{busy:.1f} of the {cores} cores" in line and "\n" not in line


def test_under_a_cgroup_quota_nothing_is_said(monkeypatch):
    monkeypatch.setattr(cpu, "_cgroup_quota", lambda: 2)
    monkeypatch.setattr(cpu, "busy_cores", lambda seconds=0.2: 2.0)
    assert cpu.crowded_line() is None


def test_busy_cores_reads_the_allowed_cores():
    busy = cpu.busy_cores(seconds=0.05)
    assert 0.0 <= busy <= len(os.sched_getaffinity(0)) + 1e-6


def test_the_blas_check_names_the_setting_where_a_row_changes_with_its_batch(monkeypatch):
    """`batch_invariant_blas` (rollout.turns=ready): where a row's product depends on how many rows share it, one
    line names MKL's strict mode; in this session (tests/conftest.py asks for that mode) rows do not depend on it."""
    assert cpu.batch_invariant_blas() is None
    linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda rows, weight: linear(rows, weight) + 1e-6 * len(rows))
    line = cpu.batch_invariant_blas()
    assert line is not None and "MKL_CBWR=AUTO,STRICT" in line and "\n" not in line
