"""Several machines (agentrl/train/machines.py, agentrl/config/machines.py), without starting any rank: the config's
rules, the `accelerate launch` flags by hand and from a faked Slurm job's variables, the Slurm profile's
interpolations, and the join of the machines on the rendezvous port (threads on localhost)."""

from __future__ import annotations

import threading
import time

import pytest
from hydra import compose

from agentrl.config.checks import check_config
from agentrl.config.typed import typed
from agentrl.errors import UserError
from agentrl.train import machines as several
from agentrl.train.distributed import free_port, launch_command

BY_HAND = ["hardware=cpu_ddp", "hardware.num_machines=2", "hardware.main_process_ip=10.0.0.1"]


def _cfg(overrides: list[str]):
    return typed(compose(config_name="train", overrides=overrides))


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


# --------------------------------------------------------------------------- the config's rules


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["hardware=cpu_ddp", "hardware.num_machines=2"], "needs hardware.main_process_ip=<machine 0's address>"),
        ([*BY_HAND, "hardware.machine_rank=2"], "hardware.machine_rank must be in [0, 2) with hardware.num_machines=2"),
        ([*BY_HAND, "hardware.num_processes=3"], "hardware.num_processes=3 counts the ranks of all 2 machines"),
        (["hardware.machine_rank=1"], "hardware.machine_rank=1 has no effect with hardware.num_machines=1"),
        (["hardware.main_process_ip=h"], "hardware.main_process_ip=h has no effect with hardware.num_machines=1"),
        (["hardware.join_timeout_s=5"], "hardware.join_timeout_s=5.0 has no effect with hardware.num_machines=1"),
        (
            [*BY_HAND, "hardware.from_slurm=true"],
            "hardware.main_process_ip=10.0.0.1 has no effect with hardware.from_slurm",
        ),
        (
            ["hardware=slurm", "hardware.num_machines=2", "hardware.num_processes=16", "rollout.vllm.mode=server"],
            "rollout.vllm.mode=server with hardware.num_machines=2 needs rollout.vllm.server_host=",
        ),
    ],
)
def test_a_machine_setting_that_cannot_work_is_one_line(hydra_conf, overrides, message):
    with pytest.raises(UserError) as err:
        check_config(_cfg(overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_settings_that_work_pass(hydra_conf):
    for overrides in (
        [*BY_HAND, "hardware.machine_rank=1", "hardware.join_timeout_s=30"],
        ["hardware=slurm", "hardware.num_machines=2", "hardware.num_processes=16"],
        ["hardware=slurm"],  # one node: from_slurm has nothing to do
        [
            "hardware=slurm",
            "hardware.num_machines=2",
            "hardware.num_processes=16",
            "rollout.vllm.mode=server",
            "rollout.vllm.server_host=gpu-07",
        ],
    ):
        check_config(_cfg(overrides))


def test_gpus_are_counted_per_machine(hydra_conf, monkeypatch):
    """check_host asks this machine for its share of the ranks only."""
    import torch

    from agentrl.config.checks import check_host

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    cfg = _cfg(["hardware=multi_gpu", "rollout.backend=hf", *BY_HAND[1:], "hardware.num_processes=16"])
    check_host(cfg)  # 8 GPUs for 8 ranks on this machine
    cfg = _cfg(["hardware=multi_gpu", "rollout.backend=hf", *BY_HAND[1:], "hardware.num_processes=32"])
    with pytest.raises(UserError, match=r"needs as many GPUs \(16 on each of hardware.num_machines=2\)"):
        check_host(cfg)


def test_memory_is_shared_by_the_ranks_of_one_machine(hydra_conf):
    from agentrl.memory.check import sharing_ranks

    assert sharing_ranks(_cfg(["hardware=cpu_ddp"])) == 2
    assert sharing_ranks(_cfg([*BY_HAND])) == 1  # one of the two ranks on each machine
    assert sharing_ranks(_cfg([*BY_HAND, "hardware.num_processes=4"])) == 2


# --------------------------------------------------------------------------- accelerate's flags


def test_by_hand_flags(hydra_conf, tmp_path):
    cfg = _cfg([*BY_HAND, "hardware.num_processes=4", "hardware.machine_rank=1", "hardware.join_timeout_s=30"])
    command = launch_command(cfg.hardware, ["hardware.machine_rank=1"], tmp_path)
    assert _flag(command, "--num_processes") == "4", "accelerate counts the ranks of all machines"
    assert _flag(command, "--num_machines") == "2" and _flag(command, "--machine_rank") == "1"
    assert _flag(command, "--main_process_ip") == "10.0.0.1"
    assert _flag(command, "--main_process_port") == str(several.DEFAULT_PORT), "the same port on every machine"
    assert _flag(command, "--rdzv_conf") == "timeout=30"
    assert set(several.OFF_RUN_FOLDER) <= set(command), "machine 0 writes the run folder's .hydra/ and log"
    machine_0 = launch_command(_cfg([*BY_HAND, "hardware.main_process_port=29555"]).hardware, [], tmp_path)
    assert _flag(machine_0, "--machine_rank") == "0" and _flag(machine_0, "--main_process_port") == "29555"
    assert "hydra.output_subdir=null" not in machine_0


def test_one_machine_keeps_its_flags(hydra_conf, tmp_path):
    command = launch_command(_cfg(["hardware=cpu_ddp"]).hardware, [], tmp_path)
    assert _flag(command, "--num_processes") == "2" and _flag(command, "--num_machines") == "1"
    assert "--machine_rank" not in command and "--main_process_ip" not in command and "--rdzv_conf" not in command


def _slurm_job(monkeypatch, node: int, nodes: int = 2, nodelist: str = "gpu-[07-08]", job: str = "4242"):
    """A faked Slurm task's variables, as Slurm sets them for one task per node."""
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    monkeypatch.setenv("SLURM_JOB_ID", job)
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", str(nodes))
    monkeypatch.setenv("SLURM_JOB_NODELIST", nodelist)
    monkeypatch.setenv("SLURM_NODEID", str(node))
    monkeypatch.setenv("SLURM_PROCID", str(node))
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("SLURM_NTASKS", str(nodes))


SLURM = ["hardware=slurm", "hardware.num_machines=2", "hardware.num_processes=16"]


@pytest.mark.parametrize("node", [0, 1])
def test_slurm_variables_become_accelerate_flags(hydra_conf, monkeypatch, tmp_path, node):
    pytest.importorskip("submitit")
    _slurm_job(monkeypatch, node)
    hardware = _cfg(SLURM).hardware
    machines = several.this_machine(hardware)
    assert machines.rank == node and machines.count == 2 and machines.per_machine == 8
    assert machines.main_ip == "gpu-07", "machine 0 is the first host of SLURM_JOB_NODELIST"
    assert machines.hosts == ("gpu-07", "gpu-08")
    command = launch_command(hardware, [], tmp_path)
    assert _flag(command, "--num_processes") == "16" and _flag(command, "--num_machines") == "2"
    assert _flag(command, "--machine_rank") == str(node) and _flag(command, "--main_process_ip") == "gpu-07"
    port = several.SLURM_PORT_BASE + 4242 % several.SLURM_PORT_BASE
    assert _flag(command, "--main_process_port") == str(port), "every node derives the same port from the job"
    assert machines.name(1) == "machine 1 (node gpu-08)"
    monkeypatch.setenv("SLURM_JOB_ID", "4243")  # another job on these nodes gets another port
    assert several.this_machine(hardware).port == port + 1


def test_slurm_job_with_another_number_of_nodes_is_refused(hydra_conf, monkeypatch):
    pytest.importorskip("submitit")
    _slurm_job(monkeypatch, 0, nodes=3, nodelist="gpu-[07-09]")
    with pytest.raises(UserError, match="hardware.num_machines=2, but this Slurm job has 3 node"):
        several.this_machine(_cfg(SLURM).hardware)


def test_from_slurm_outside_a_slurm_job_is_refused(hydra_conf, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(UserError, match="runs inside a Slurm job: submit it with -m"):
        several.this_machine(_cfg(SLURM).hardware)


def test_slurm_profile_asks_for_the_nodes_and_their_gpus(hydra_conf):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cfg = compose(config_name="train", overrides=SLURM, return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher.nodes == 2 and launcher.tasks_per_node == 1 and launcher.gpus_per_node == 8
    assert cfg.hardware.from_slurm is True
    one = compose(config_name="train", overrides=["hardware=slurm"], return_hydra_config=True)
    assert one.hydra.launcher.nodes == 1 and one.hydra.launcher.gpus_per_node == 8


def test_config_shows_the_machines(hydra_conf):
    assert several.describe(_cfg(["hardware=cpu_ddp"]).hardware) == "ranks: 2 on this machine"
    line = several.describe(_cfg([*BY_HAND, "hardware.num_processes=4", "hardware.machine_rank=1"]).hardware)
    assert line.startswith("ranks: 4 over 2 machines, 2 per machine (this is machine 1; machine 0 at 10.0.0.1:29500")
    assert "under Slurm" in several.describe(_cfg(SLURM).hardware)


# --------------------------------------------------------------------------- the join


def _machines(rank: int, port: int, count: int = 2, timeout: float = 5.0, ranks: int = 2) -> several.Machines:
    return several.Machines(count, rank, "127.0.0.1", port, ranks, timeout)


def _join_in_thread(machines: several.Machines) -> dict:
    """Join as `machines.rank` in a thread: as a machine that connects to machine 0, even with rank 0 (a mistake)."""
    outcome: dict = {}

    def run():
        try:
            several._join_machine_0(machines)
            outcome["ok"] = True
        except UserError as err:
            outcome["error"] = str(err)

    thread = threading.Thread(target=run)
    thread.start()
    outcome["thread"] = thread
    return outcome


def test_machines_join_then_free_the_port(monkeypatch):
    port = free_port()
    others = [_join_in_thread(_machines(rank, port, count=3)) for rank in (2, 1)]  # before machine 0 is up
    time.sleep(0.3)
    several.join(_machines(0, port, count=3))
    for outcome in others:
        outcome["thread"].join(10)
        assert outcome.get("ok"), outcome
    import socket

    with socket.socket() as s:  # torchrun's store takes the port next
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))


def test_a_machine_that_never_joins_is_named_within_the_timeout():
    port = free_port()
    started = time.monotonic()
    with pytest.raises(UserError) as err:
        several.join(_machines(0, port, timeout=1.0))
    assert time.monotonic() - started < 3
    assert str(err.value).startswith("machine 1 of 2 did not join within hardware.join_timeout_s=1 s")
    other = _join_in_thread(_machines(2, port, count=3, timeout=1.5))
    with pytest.raises(UserError) as err:
        several.join(_machines(0, port, count=3, timeout=1.5))
    other["thread"].join(10)
    assert str(err.value).startswith("machine 1 of 3 did not join"), "the one that came is not named"
    assert "joined: machine 2" in str(err.value)
    assert other["error"] == str(err.value), "the machine that came ends with the same line"


def test_machine_0_that_never_answers_is_named_within_the_timeout():
    started = time.monotonic()
    with pytest.raises(UserError) as err:
        several.join(_machines(1, free_port(), timeout=1.0))
    assert time.monotonic() - started < 3
    assert str(err.value).startswith("machine 0 (the main process, 127.0.0.1:")
    assert "did not answer within hardware.join_timeout_s=1 s" in str(err.value)


@pytest.mark.parametrize(
    "other,message",
    [
        ({"rank": 0}, "which machine 0 has itself"),
        ({"ranks": 4}, "give every machine the same"),
    ],
)
def test_machines_that_disagree_are_one_line(other, message):
    port = free_port()
    settings = {"rank": 1, "ranks": 2, **other}
    joining = _join_in_thread(_machines(settings["rank"], port, ranks=settings["ranks"]))
    with pytest.raises(UserError, match=message):
        several.join(_machines(0, port))
    joining["thread"].join(10)
    assert message in joining.get("error", ""), joining
