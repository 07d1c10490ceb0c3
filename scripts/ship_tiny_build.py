"""Make the tiny-model build that agentrl ships: agentrl/models/shipped/<env>/.

A build of the embedded tiny model differs from one CPU to the next (floating-point order), and RL's outcome with
it (docs/architecture.md, "How much the build decides"). agentrl therefore ships one build of the default config,
which every machine loads as it is. This script copies a build into that folder with its record (shipped.json):
the settings it was built from, a fingerprint of the environment's demonstration text, and where it was built.

    python scripts/ship_tiny_build.py                              # the default config, built here (or cached)
    python scripts/ship_tiny_build.py --overrides model.tiny.seed=3
    AGENTRL_CACHE=/path/to/cache python scripts/ship_tiny_build.py --overrides model.tiny.seed=3   # a cached build

The config must then be the default's (conf/model/tiny.yaml), or no run will load the build:
tests/test_tiny_model.py checks that it is. Which build ships, and why, is in docs/architecture.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time

# what a run loads, and the build's own report; the record is written beside them
BUILD_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "warmup.json",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides of the train config")
    args = parser.parse_args()

    import torch

    from agentrl.config.store import compose_config
    from agentrl.config.typed import typed
    from agentrl.cpu import cpu_model
    from agentrl.models import tiny

    cfg = typed(compose_config("train", [*args.overrides, "model.tiny.shipped=false"]))
    source = tiny.ensure_tiny_model(cfg.model.tiny, cfg.env)  # the cached build, or one made now
    target = tiny.SHIPPED / cfg.env.name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in BUILD_FILES:
        shutil.copy2(source / name, target / name)
    record = {
        "spec": tiny.build_spec(cfg.model.tiny, cfg.env),
        "text_fingerprint": tiny.text_fingerprint(cfg.model.tiny, cfg.env),
        "built_on": {"cpu": cpu_model(), "torch": torch.__version__},  # the machine this script runs on
        "shipped_at": time.strftime("%Y-%m-%d"),
    }
    (target / tiny.SHIPPED_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    print(f"shipped {source} as {target}")
    print(json.dumps(json.loads((target / "warmup.json").read_text()), indent=2))


if __name__ == "__main__":
    main()
