"""What `agentrl eval` shows and writes: the protocol and the results table on the terminal; eval.json (the protocol
and the metrics) when the evaluation ends, and trajectories.jsonl (a line an episode: its outcome and turns) as the
episodes end, so that a killed evaluation keeps the episodes it finished."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from agentrl.errors import UserError
from agentrl.rollout.batch import EpisodeResult, StepBatch

log = logging.getLogger(__name__)
TRAJECTORIES = "trajectories.jsonl"  # agentrl eval's episodes, a line each


def print_protocol(protocol: dict) -> None:
    from rich.console import Console

    console = Console()
    console.print("[bold]evaluation protocol[/]")
    for key in ("policy", "backend", "split", "tasks", "episodes_per_task", "seed", "temperature"):
        console.print(f"  {key}: {protocol[key]}")
    console.print(f"  env: {protocol['env']}")
    by_source: dict[str, list[str]] = {}
    for key, source in protocol["sources"].items():
        by_source.setdefault(source, []).append(f"eval.{key}")
    # which values follow the training run, and which the command line changed
    said = {
        "run": "the training run",
        "recipe": "the recipe",
        "composed": "the training config of model= (as agentrl train composes it)",
        "command line": "the command line",
        "default": "conf/eval.yaml",
    }
    line = "; ".join(f"from {said[s]}: {', '.join(keys)}" for s, keys in sorted(by_source.items()))
    console.print(f"  {line}", soft_wrap=True, markup=False)


def print_table(metrics: dict[str, float]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="held-out results")
    table.add_column("task type")
    table.add_column("success", justify="right")
    rows = sorted(k for k in metrics if k.endswith("/success") and k.count("/") == 2)
    table.add_row("[bold]all[/]", f"[bold]{metrics['eval/success']:.3f}[/]")
    for key in rows:
        table.add_row(key.split("/")[1], f"{metrics[key]:.3f}")
    console = Console()
    console.print(table)
    agents = sorted({k.split("/")[2] for k in metrics if k.startswith("eval/agent/")})
    if agents:  # a team: who fails, and whose replies do not parse
        by_agent = Table(title="by agent")
        for column in ("agent", "success of its episodes", "invalid rate", "share of turns"):
            by_agent.add_column(column, justify="left" if column == "agent" else "right")
        for agent in agents:
            figures = (metrics[f"eval/agent/{agent}/{m}"] for m in ("success", "invalid_rate", "turn_share"))
            by_agent.add_row(agent, *(f"{v:.3f}" for v in figures))
        console.print(by_agent)
    summary = {k: v for k, v in metrics.items() if k.count("/") == 1 and not k.endswith("/success")}
    console.print("  ".join(f"{k.split('/')[1]}={v:.3f}" for k, v in summary.items()))


def _episode_line(e: EpisodeResult) -> str:
    """One line of trajectories.jsonl: an episode's outcome and its turns; on the tool route (env=tools) also its
    conversation (`messages`: the calls in the assistant's tool_calls, each result a tool message) and its tool counts
    (`counts`: tool_calls, tool_errors, tool_errors/<kind>)."""
    record = {
        "task_id": e.task_id,
        "task_type": e.task_type,
        "won": e.won,
        "return": e.ret,
        "length": e.length,
        "fault": e.fault,
        "turns": e.transcript,
        **({"messages": e.messages} if e.messages is not None else {}),
        **({"counts": e.counts} if e.counts else {}),
    }
    return json.dumps(record) + "\n"


class EpisodeLog:
    """trajectories.jsonl written as the evaluation's episodes end, a line each, line-buffered: an evaluation that is
    killed keeps the episodes it finished (eval.json, written at the end, is then missing). The finished evaluation
    rewrites it in episode order (`write_results`)."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir

    def __enter__(self) -> EpisodeLog:
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.file = (self.out_dir / TRAJECTORIES).open("w", buffering=1)
        except OSError as err:
            raise UserError(f"cannot write the results to {self.out_dir}: {err.strerror}") from None
        print(f"  episodes, a line as each ends: {self.out_dir / TRAJECTORIES}", flush=True)
        return self

    def write(self, episode: EpisodeResult) -> None:
        try:
            self.file.write(_episode_line(episode))
        except OSError as err:
            raise UserError(f"cannot write the results to {self.out_dir}: {err.strerror}") from None

    def __exit__(self, *exc) -> None:
        self.file.close()


def write_results(out_dir: Path, protocol: dict, metrics: dict, batch: StepBatch) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        # in episode order, replacing the file written as the episodes ended (whole, or not at all); then eval.json,
        # whose presence says the evaluation finished
        partial = out_dir / (TRAJECTORIES + ".partial")
        partial.write_text("".join(_episode_line(e) for e in batch.episodes))
        partial.replace(out_dir / TRAJECTORIES)
        (out_dir / "eval.json").write_text(json.dumps({"protocol": protocol, "metrics": metrics}, indent=2))
    except OSError as err:
        raise UserError(f"cannot write the results to {out_dir}: {err.strerror}") from None
    log.info("wrote %s and %s", out_dir / "eval.json", TRAJECTORIES)
    print(f"results: {out_dir / 'eval.json'}")
