"""Several machines: one training job over hardware.num_machines machines, through accelerate's multi-node launch.

Every machine runs one agentrl process (by hand, or one Slurm task per node under hardware=slurm), which launches
that machine's hardware.num_processes / hardware.num_machines ranks with `accelerate launch --num_machines N
--machine_rank R --main_process_ip HOST --main_process_port PORT`; torchrun's rendezvous on machine 0 makes the
ranks of all machines one job. The machines share the run folder (a shared filesystem, the same path on each):
global rank 0 writes the run's records, metrics and logs there, every rank adds its RNG and agentrl state to each
checkpoint, and the agentrl processes of the other machines write nothing of their own.

Before the launch, the agentrl processes meet once on the rendezvous port (`join`): machine 0 listens, the others
connect and say who they are. A machine that does not come within hardware.join_timeout_s ends the others with one
line that names it (torchrun's own timeout would end them with its traceback, not saying which machine is missing);
then machine 0 lets the port go, and torchrun's rendezvous takes it.

Under Slurm (hardware.from_slurm), a node's machine rank is its SLURM_NODEID and machine 0 is the first host of
SLURM_JOB_NODELIST, both read through submitit's JobEnvironment; the port, unless set, follows from the job id.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from agentrl.errors import UserError

DEFAULT_PORT = 29500  # accelerate's and torchrun's default, the same on every machine
SLURM_PORT_BASE = 20000  # under Slurm without a set port: 20000 + the job id modulo 20000, the same on every node
HELLO = "agentrl-join"
# Hydra's overrides for a process on a machine other than machine 0: no .hydra/ and no log file of its own in the
# shared run folder (global rank 0 writes them); its log lines stay on its console
OFF_RUN_FOLDER = (
    "hydra.output_subdir=null",
    "~hydra.job_logging.handlers.file",
    "hydra.job_logging.root.handlers=[console]",
)


@dataclass(frozen=True)
class Machines:
    """The machines of one job, as this machine sees them."""

    count: int
    rank: int  # this machine's
    main_ip: str | None  # machine 0's address; None on one machine
    port: int | None  # the rendezvous port; None on one machine without a set port: a free one
    ranks: int  # the ranks of all machines (hardware.num_processes)
    join_timeout_s: float
    hosts: tuple[str, ...] = ()  # the machines' host names where the scheduler says them (Slurm), in rank order

    @property
    def per_machine(self) -> int:
        return self.ranks // self.count

    def name(self, rank: int) -> str:
        """'machine 1' or, where the scheduler named the hosts, 'machine 1 (node gpu-02)'."""
        host = f" (node {self.hosts[rank]})" if rank < len(self.hosts) else ""
        return f"machine {rank}{host}"


def this_machine(hardware: Any) -> Machines:
    """This machine's place in the job: from hardware.* by hand, from the Slurm job with hardware.from_slurm."""
    count, ranks = hardware.num_machines, hardware.num_processes
    if count == 1:
        return Machines(1, 0, None, hardware.main_process_port, ranks, hardware.join_timeout_s)
    if hardware.from_slurm:
        return from_slurm(hardware)
    port = hardware.main_process_port or DEFAULT_PORT
    return Machines(count, hardware.machine_rank, hardware.main_process_ip, port, ranks, hardware.join_timeout_s)


def from_slurm(hardware: Any) -> Machines:
    """The machine rank, machine 0's host and the port from the Slurm job's variables (submitit's JobEnvironment):
    SLURM_NODEID, the first host of SLURM_JOB_NODELIST, SLURM_JOB_NUM_NODES, SLURM_JOB_ID."""
    if "SLURM_JOB_ID" not in os.environ:
        raise UserError(
            f"hardware.from_slurm=true with hardware.num_machines={hardware.num_machines} runs inside a Slurm job: "
            "submit it with -m (agentrl train -m hardware=slurm ...), or give hardware.machine_rank and "
            "hardware.main_process_ip by hand with hardware.from_slurm=false"
        )
    node, nodes, hosts, job_id = _slurm_job()
    if nodes != hardware.num_machines:
        raise UserError(
            f"hardware.num_machines={hardware.num_machines}, but this Slurm job has {nodes} node(s); "
            "hydra.launcher.nodes must equal hardware.num_machines (conf/hardware/slurm.yaml interpolates it)"
        )
    port = hardware.main_process_port or SLURM_PORT_BASE + int(job_id) % SLURM_PORT_BASE
    return Machines(nodes, node, hosts[0], port, hardware.num_processes, hardware.join_timeout_s, tuple(hosts))


def _slurm_job() -> tuple[int, int, list[str], str]:
    """(node id, number of nodes, host names, raw job id) of the Slurm job, from submitit's JobEnvironment (which
    expands the node list); without submitit, from the variables themselves, where the node list is one host."""
    try:
        from submitit.slurm.slurm import SlurmJobEnvironment
    except ImportError:
        hosts = os.environ.get("SLURM_JOB_NODELIST", "")
        if any(c in hosts for c in "[,"):
            raise UserError(
                f"SLURM_JOB_NODELIST={hosts} needs expanding: install submitit (pip install 'agentrl[sweep]')"
            ) from None
        node, nodes = int(os.environ.get("SLURM_NODEID", 0)), int(os.environ.get("SLURM_JOB_NUM_NODES", 1))
        return node, nodes, [hosts], os.environ["SLURM_JOB_ID"]
    env = SlurmJobEnvironment()
    return env.node, env.num_nodes, list(env.hostnames), env.raw_job_id


def accelerate_flags(machines: Machines) -> list[str]:
    """`accelerate launch`'s flags for the machines: --num_processes is the ranks of all machines, as accelerate
    counts them; with several, each machine's rank, machine 0's address and the rendezvous's timeout."""
    flags = ["--num_processes", str(machines.ranks), "--num_machines", str(machines.count)]
    if machines.count > 1:
        flags += [
            "--machine_rank",
            str(machines.rank),
            "--main_process_ip",
            str(machines.main_ip),
            "--rdzv_conf",
            f"timeout={max(1, round(machines.join_timeout_s))}",  # torchrun's rendezvous, after the join below
        ]
    return flags


def describe(hardware: Any) -> str:
    """One line for `agentrl config`: the ranks and where they run."""
    ranks, count = hardware.num_processes, hardware.num_machines
    if count == 1:
        return f"ranks: {ranks} on this machine"
    per = ranks // count if ranks % count == 0 else ranks / count
    if hardware.from_slurm:
        where = "under Slurm: each node's machine rank from the job, machine 0 its first host"
    else:
        where = f"this is machine {hardware.machine_rank}; machine 0 at {hardware.main_process_ip}"
        where += f":{hardware.main_process_port or DEFAULT_PORT}"
    return f"ranks: {ranks} over {count} machines, {per} per machine ({where}; a shared run folder)"


def on_other_machine() -> bool:
    """In a training rank: whether it runs on a machine other than machine 0 (torchrun's GROUP_RANK)."""
    return int(os.environ.get("GROUP_RANK", "0") or 0) > 0


# On machine 0 of several, a rank that has done its work waits this long before it exits. torchrun's agent on
# machine 0 holds the store through which every machine's agent passes its exit barrier: when it left the barrier
# first and exited, another agent still waiting on that store logged "Error waiting on exit barrier" with a
# traceback (measured on two localhost machines), though every rank had finished. Arriving last, it releases the
# others' wait before it closes the store.
EXIT_LAG_S = 2.0


def exit_last() -> None:
    """In a training rank about to exit: on machine 0 of several, let the other machines' agents reach torchrun's
    exit barrier first (EXIT_LAG_S)."""
    if int(os.environ.get("GROUP_WORLD_SIZE", "1") or 1) > 1 and not on_other_machine():
        time.sleep(EXIT_LAG_S)


def keep_off_run_folder(folder: Any) -> None:
    """On a machine other than machine 0: stop this process's log lines from going into the run folder's log file
    (Hydra's file handler, where OFF_RUN_FOLDER could not be given: a Slurm task); global rank 0 writes the run's
    log. The console keeps them."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        filename = getattr(handler, "baseFilename", None)
        if filename and os.path.dirname(os.path.abspath(filename)) == os.path.abspath(str(folder)):
            root.removeHandler(handler)
            handler.close()


# --------------------------------------------------------------------------- the join


def join(machines: Machines) -> None:
    """Meet the other machines on the rendezvous port before torchrun does; raise UserError naming a machine that
    did not come within machines.join_timeout_s (or a rank that two machines claim)."""
    if machines.count == 1:
        return
    if machines.rank == 0:
        _wait_for_machines(machines)
    else:
        _join_machine_0(machines)


def _hello(machines: Machines) -> str:
    return f"{HELLO} {machines.rank} {machines.count} {machines.ranks} {socket.gethostname()}\n"


def _wait_for_machines(machines: Machines) -> None:
    timeout = machines.join_timeout_s
    deadline = time.monotonic() + timeout
    joined: dict[int, tuple[socket.socket, str]] = {}
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        try:
            listener.bind(("", machines.port))
        except OSError as err:
            raise UserError(
                f"machine 0 cannot listen on hardware.main_process_port={machines.port} ({err.strerror}); "
                "choose another port, the same on every machine"
            ) from None
        listener.listen(machines.count * 2)
        problem = None
        while len(joined) < machines.count - 1 and problem is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            listener.settimeout(left)
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                break
            problem = _admit(conn, machines, joined, deadline)
        if problem is None and len(joined) < machines.count - 1:
            missing = [r for r in range(1, machines.count) if r not in joined]
            names = ", ".join(machines.name(r) for r in missing)
            came = ", ".join(f"machine {r} ({host})" for r, (_, host) in sorted(joined.items())) or "none"
            if machines.hosts:
                advice = "its Slurm task did not start or failed first: see its log in the job's .submitit folder"
            else:
                advice = (
                    f"start it with hardware.machine_rank={missing[0]} and the same hardware.main_process_ip and port"
                )
            problem = (
                f"{names} of {machines.count} did not join within hardware.join_timeout_s={timeout:g} s "
                f"(machine 0 waited on port {machines.port}; joined: {came}); {advice}"
            )
        for conn, _ in joined.values():
            _send(conn, f"stop {problem}\n" if problem else "go\n")
        if problem:
            raise UserError(problem)
        for conn, _ in joined.values():  # the others close first, so that the port is free again at once
            conn.settimeout(5)
            try:
                conn.recv(1)
            except OSError:
                pass
    finally:
        for conn, _ in joined.values():
            conn.close()
        listener.close()


def _admit(conn: socket.socket, machines: Machines, joined: dict, deadline: float) -> str | None:
    """Read one machine's hello; keep it, drop a stranger, or return the problem that ends the join."""
    conn.settimeout(max(0.1, min(5.0, deadline - time.monotonic())))
    try:
        words = conn.makefile("r").readline().split()
    except OSError:
        words = []
    if len(words) != 5 or words[0] != HELLO:
        conn.close()  # not an agentrl machine (a port scanner, a stray torchrun): ignore it
        return None
    rank, count, ranks, host = int(words[1]), int(words[2]), int(words[3]), words[4]
    problem = None
    if (count, ranks) != (machines.count, machines.ranks):
        problem = (
            f"machine {rank} ({host}) has hardware.num_machines={count} and hardware.num_processes={ranks}, "
            f"machine 0 has {machines.count} and {machines.ranks}: give every machine the same"
        )
    elif rank in joined:
        problem = f"hardware.machine_rank={rank} was given to two machines ({joined[rank][1]} and {host})"
    elif not 0 < rank < machines.count:
        problem = f"a machine ({host}) joined with hardware.machine_rank={rank}, which machine 0 has itself"
    if problem:
        _send(conn, f"stop {problem}\n")
        conn.close()
        return problem
    joined[rank] = (conn, host)
    return None


def _join_machine_0(machines: Machines) -> None:
    timeout = machines.join_timeout_s
    deadline = time.monotonic() + timeout
    address = f"{machines.main_ip}:{machines.port}"
    conn = None
    while conn is None:
        try:
            conn = socket.create_connection((machines.main_ip, machines.port), timeout=2)
        except OSError as err:
            if isinstance(err, socket.gaierror):
                raise UserError(
                    f"hardware.main_process_ip={machines.main_ip} is no address this machine knows"
                ) from None
            if time.monotonic() + 0.5 >= deadline:
                raise UserError(
                    f"{machines.name(0)} (the main process, {address}) did not answer within "
                    f"hardware.join_timeout_s={timeout:g} s; start it too, or check its address and that the port "
                    "is open to this machine"
                ) from None
            time.sleep(0.5)
    try:
        _send(conn, _hello(machines))
        conn.settimeout(timeout + 10)  # machine 0 answers when every machine came, or at its own timeout
        try:
            answer = conn.makefile("r").readline().strip()
        except OSError:
            answer = ""
    finally:
        conn.close()
    if answer == "go":
        return
    if answer.startswith("stop "):
        raise UserError(answer[len("stop ") :])
    raise UserError(f"{machines.name(0)} ({address}) closed the join without an answer; see its messages")


def _send(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall(line.encode())
    except OSError:
        pass
