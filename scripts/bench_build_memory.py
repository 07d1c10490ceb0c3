"""The tiny model's build against the observation's length: peak memory and time.

Builds the tiny model (the composed `agentrl train` config: the tiny model's default settings) on three
environments of the tests' own (tests/envs/toy_gym.py, `make_verbose`), each build in a fresh process:

- short: fixed observations of 60 characters;
- 1000 chars: fixed observations of 1,000 characters;
- growing log: the game's whole log so far, 800 characters at the start and 400 more a turn, 30 turns (about
  12,800 at the last turn), as TextArena's games write it.

Random play lasts the 30 turns of every episode. Each row gives the build's peak resident memory (the building
process's own; the environments' worker processes hold one environment each), its wall time and the longest
observation in characters. `--budgets` repeats the growing log at other prompt budgets
(`rollout.max_prompt_tokens`, which the build cuts its prompts to), to show how the peak follows the budget.

    python scripts/bench_build_memory.py
    python scripts/bench_build_memory.py --budgets 256 512 1024 --overrides model.tiny.warmup_steps=300

The table in docs/benchmarks.md ("The tiny model's build on verbose environments") comes from it, on an otherwise
idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FACTORY = "tests.envs.toy_gym:make_verbose"
KINDS = {  # name -> the environment's kwargs
    "short": {"first": 60, "per_turn": 60, "whole_log": False},
    "1000 chars": {"first": 1000, "per_turn": 1000, "whole_log": False},
    "growing log": {"first": 800, "per_turn": 400, "whole_log": True},
}
GROWING = "growing log"

# What the fresh process runs: one build into a scratch folder, then its measures as one JSON line.
CHILD = """
import json, resource, sys, tempfile, time
from pathlib import Path
from agentrl.config.store import compose_config
from agentrl.models import tiny
cfg = compose_config("train", json.loads(sys.argv[1]))
longest = [0]
play = tiny._play
def measured_play(*args, **kwargs):
    batch = play(*args, **kwargs)
    longest[0] = max([longest[0], *map(len, batch.observation)])
    return batch
tiny._play = measured_play
with tempfile.TemporaryDirectory() as scratch:
    started = time.perf_counter()
    tiny.build_tiny_model(cfg.model.tiny, cfg.env, Path(scratch) / "tiny")
    seconds = time.perf_counter() - started
    report = json.loads((Path(scratch) / "tiny" / "warmup.json").read_text())
print(json.dumps({
    "seconds": seconds,
    "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "longest_observation_chars": longest[0],
    "budget": cfg.model.tiny.max_prompt_tokens,
    "valid_action_rate": report["valid_action_rate"],
}))
"""


def build(kind: str, overrides: list[str]) -> dict:
    """One build in a fresh process, on the `kind` environment; its measures."""
    kwargs = json.dumps(KINDS[kind]).replace('"', "").replace(" ", "")
    composed = ["env=gym", f"env.factory={FACTORY}", f"+env.kwargs={kwargs}", "model.tiny.shipped=false", *overrides]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(composed)], cwd=REPO, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"the build on {kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=int, nargs="*", default=[], help="growing log again at these prompt budgets")
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides of the train config")
    args = parser.parse_args()

    runs = [(kind, args.overrides) for kind in KINDS]
    runs += [(GROWING, [*args.overrides, f"rollout.max_prompt_tokens={b}"]) for b in args.budgets]
    print(f"{'observations':<14} {'budget':>6} {'longest obs.':>15} {'peak MiB':>9} {'seconds':>8}")
    for kind, overrides in runs:
        row = build(kind, overrides)
        print(
            f"{kind:<14} {row['budget']:>6} {row['longest_observation_chars']:>15,} {row['peak_mib']:>9,.0f} "
            f"{row['seconds']:>8.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
