"""What this CPU offers a run: its model, the cores it may use, torch's thread count from them, native bf16, matrix
products whose rows do not depend on the batch.

Pure reads of the machine (the scheduler's affinity, the cgroup's CPU quota, /proc/cpuinfo's flags, how busy the
cores are) and two setters; no agentrl import.
"""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path

# The instructions that make bf16 matmuls fast (oneDNN's AVX512-BF16 and AMX kernels); without them torch
# emulates bf16 in fp32 and a bf16 run is slower than fp32.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO = Path("/proc/cpuinfo")
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def available_cores() -> int:
    """Cores this process may run on: its affinity mask, cut to the cgroup's CPU quota where one is set."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, quota)) if quota else max(1, cores)


def _cgroup_quota() -> int | None:
    """The cgroup (v2) CPU quota in whole cores, rounded up; None where there is none or it cannot be read."""
    try:
        limit, period = CGROUP_CPU_MAX.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if limit == "max":
        return None
    return math.ceil(int(limit) / int(period))


def cpu_flags() -> set[str]:
    """The flags /proc/cpuinfo lists for the first core; empty where there is no such file."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (what a measurement names as its machine); elsewhere what
    `platform` knows."""
    try:
        for line in CPUINFO.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def native_bf16() -> bool:
    """Whether this CPU has bf16 matmul instructions (AVX512-BF16 or AMX-BF16)."""
    return any(flag in cpu_flags() for flag in BF16_FLAGS)


def set_torch_threads(ranks_here: int = 1) -> str:
    """Set torch's intra-op threads to this process's share of the available cores (shared equally by the ranks
    on this machine) and return the line that says so. An OMP_NUM_THREADS the user (or a launcher) set wins."""
    import torch

    cores = available_cores()
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return f"torch threads: {torch.get_num_threads()} (OMP_NUM_THREADS; {cores} cores available)"
    threads = max(1, cores // max(1, ranks_here))
    torch.set_num_threads(threads)
    share = f", shared by {ranks_here} ranks" if ranks_here > 1 else ""
    return f"torch threads: {threads} ({cores} cores available{share})"


def busy_cores(seconds: float = 0.2) -> float:
    """How many of the cores this process may run on were busy over `seconds` (psutil's per-core use over the
    affinity mask), measured while this process waits: the work of other processes."""
    import psutil

    per_core = psutil.cpu_percent(interval=seconds, percpu=True)
    try:
        allowed = [per_core[core] for core in os.sched_getaffinity(0) if core < len(per_core)]
    except AttributeError:  # not Linux
        allowed = per_core
    return sum(allowed) / 100


# Other work's busy cores plus this run's threads may exceed the cores by this much before the run says so: a
# tolerance for the shell and the system's own short bursts over the sampled moment.
CROWDED_MARGIN = 0.75


def crowded_line(seconds: float = 0.2) -> str | None:
    """One warning line where this run's torch threads and the work already running need more cores than there are,
    else None. torch sizes its threads from the cores, not from what else runs: two 2-thread torch jobs on 2 cores
    each ran several times slower than alone (README, "Hardware profiles"). Jobs of one thread each side by side on
    as many cores (scripts/compare_algorithms.py) fit, and are not warned of. Where a cgroup quota caps the cores,
    the per-core use read is the host's, not this process's share, so nothing is said."""
    import torch

    if _cgroup_quota() is not None:
        return None
    cores, threads = available_cores(), torch.get_num_threads()
    busy = busy_cores(seconds)
    if busy + threads - cores < CROWDED_MARGIN:
        return None
    return (
        f"{busy:.1f} of the {cores} cores this run may use are busy with other work: its {threads} torch threads will "
        f"share them and both will run slower; run one job at a time, or set OMP_NUM_THREADS for each"
    )


# MKL's strict conditional numerical reproducibility: every row of a matrix product is computed the same whatever
# the number of rows and threads. Without it, MKL on an Intel Xeon takes rows 4, 8 or 16 at a time by the product's
# shape and threads, and a row's bits change with the batch it is in (docs/architecture.md, "Rows that do not depend
# on timing"). MKL reads the variable once, at its first product in the process.
STRICT_BLAS = ("MKL_CBWR", "AUTO,STRICT")
# HFPolicy.act_keyed pads each generation call to a multiple of this many rows (rollout/policies.py): the matrix
# product takes rows 4 at a time, and a lone row, or the last 1 to 3 of a batch, another way
KEYED_ROWS = 4


def batch_invariant_blas() -> str | None:
    """Ask MKL for strict reproducibility (STRICT_BLAS, where the environment does not already set MKL_CBWR) and check
    what `HFPolicy.act_keyed` relies on: a row of a matrix product is the same at every place of a call of
    KEYED_ROWS, 2 x KEYED_ROWS ... 4 x KEYED_ROWS rows (act_keyed pads each call to a multiple of KEYED_ROWS); None
    where it is, else the line that says it is not. (A lone row, or 2 or 3, may come out otherwise: on a 2-core AMD
    EPYC with AVX-512 they do, in MKL's strict mode too.) The setting comes too late where torch has already
    multiplied matrices in this process: MKL has read it by then, and the check says so."""
    import torch

    name, value = STRICT_BLAS
    os.environ.setdefault(name, value)
    generator = torch.Generator().manual_seed(0)
    for width, out in ((128, 64), (384, 128), (960, 960)):  # shapes whose rows differed by batch without it
        weight = torch.randn(out, width, generator=generator)
        rows = torch.randn(4 * KEYED_ROWS, width, generator=generator)
        reference = torch.nn.functional.linear(rows[:KEYED_ROWS], weight)[0]
        for size in range(KEYED_ROWS, 4 * KEYED_ROWS + 1, KEYED_ROWS):
            for place in range(size):
                others = rows[1:size]
                batch = torch.cat([others[:place], rows[:1], others[place:]])
                if not torch.equal(torch.nn.functional.linear(batch, weight)[place], reference):
                    return (
                        f"a row of this process's matrix products changes with its batch: start it with {name}={value} "
                        f"in the environment (MKL reads {name} once, at the process's first matrix product)"
                    )
    return None
