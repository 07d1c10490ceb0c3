"""How long does the embedded tiny model take to build, and where does the time go?

Builds the default tiny model (the composed `agentrl train` config, plus any overrides) into a scratch folder,
outside the cache, and prints each phase's seconds: playing the demonstrations, training the tokenizer, preparing
the warm-up's data set, the warm-up's steps (and ms per step), the build's own check. Then the build's report
(warmup.json: admissible replies, entropy and mass over the admissible actions, success).

    python scripts/bench_tiny_build.py
    OMP_NUM_THREADS=1 python scripts/bench_tiny_build.py --overrides model.tiny.warmup_steps=300

The README's and docs/architecture.md's build times come from it, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from pathlib import Path

PHASES = {  # the function timed -> what it is
    "_play": "play (demonstrations, then the check's turns)",
    "build_tokenizer": "tokenizer",
    "pair_dataset": "warm-up data set",
    "warm_up": "warm-up (data set and steps)",
    "valid_action_rate": "the build's check",
}


def timed(module, name: str, seconds: dict[str, list[float]]) -> None:
    function = getattr(module, name)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds.setdefault(name, []).append(time.perf_counter() - started)

    setattr(module, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides of the train config")
    args = parser.parse_args()

    import transformers

    from agentrl.config.store import compose_config
    from agentrl.models import fine_tune, tiny

    cfg = compose_config("train", args.overrides)

    seconds: dict[str, list[float]] = {}
    for name in ("_play", "build_tokenizer", "warm_up", "valid_action_rate"):
        timed(tiny, name, seconds)
    timed(fine_tune, "pair_dataset", seconds)
    timed(transformers.Trainer, "train", seconds)

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        tiny.build_tiny_model(cfg.model.tiny, cfg.env, Path(scratch) / "tiny")
        total = time.perf_counter() - started
        report = json.loads((Path(scratch) / "tiny" / "warmup.json").read_text())

    steps = cfg.model.tiny.warmup_steps
    train_s = sum(seconds.get("train", [0.0]))
    rows = [(label, sum(seconds.get(name, [0.0]))) for name, label in PHASES.items()]
    rows.insert(4, (f"  of which the {steps} steps ({1000 * train_s / max(steps, 1):.1f} ms/step)", train_s))
    print(f"\n{'phase':<50} {'seconds':>8}")
    for label, value in rows:
        print(f"{label:<50} {value:>8.1f}")
    print(f"{'build':<50} {total:>8.1f}")
    print(json.dumps({k: report[k] for k in report if k != "build_seconds"}, indent=2))


if __name__ == "__main__":
    main()
