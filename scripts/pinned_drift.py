"""How far tests/train/test_pinned.py's numbers move when only the arithmetic changes, against how far a real change
moves them: the two figures its tolerance is chosen from.

    python scripts/pinned_drift.py                # every setting and change; a table; about 15 minutes on 2 cores
    python scripts/pinned_drift.py --quick        # two settings, two changes

Arithmetic settings (same code, same seed): torch's CPU kernels (ATEN_CPU_CAPABILITY: default, avx2, avx512
where the CPU has it), 1 or 2 threads, oneDNN (mkldnn) on or off. Real changes: one hyperparameter moved by 1%
(learning rate, KL coefficient) and one line of the loss changed (the token-mean divides by one token more).
Each row is the largest absolute difference of train/loss and train/kl over the 3 iterations of the pinned cases,
from the run with the default setting on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.train.test_pinned import OVERRIDES, RUN  # noqa: E402  (the pinned runs themselves)

# python code run before the CLI in the child process: the setting or change it makes
PRELUDE = {
    "mkldnn off": "import torch; torch.backends.mkldnn.enabled = False",
    "token-mean over one more token": (
        "import agentrl.algos.policy_loss as pl; _mt = pl.masked_total\n"
        "def masked_total(per_token, mask, aggregation):\n"
        "    total = _mt(per_token, mask, aggregation)\n"
        "    return total * mask.sum() / (mask.sum() + 1) if aggregation == 'token_mean' else total\n"
        "pl.masked_total = masked_total\n"
        "import agentrl.train.trainer as tr; tr.masked_total = masked_total"
    ),
}


def run(cache: Path, algo: str, env: dict, prelude: str = "", extra: tuple[str, ...] = ()) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        code = f"{prelude}\nfrom agentrl.cli import app\napp({[*RUN, *OVERRIDES[algo], *extra, f'hydra.run.dir={run_dir}']!r})"
        full_env = {**os.environ, "AGENTRL_CACHE": str(cache), "PYTHONPATH": str(REPO), **env}
        done = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, cwd=tmp)
        if done.returncode != 0:
            raise SystemExit(f"{algo} {env} {extra}: exit {done.returncode}\n{done.stderr[-2000:]}")
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [(r["train/loss"], r["train/kl"]) for r in records if "train/loss" in r]


def largest_difference(a, b) -> float:
    return max(abs(x - y) for pa, pb in zip(a, b) for x, y in zip(pa, pb))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--cache", default=os.environ.get("AGENTRL_CACHE", str(Path(tempfile.gettempdir()) / "pinned-drift-cache"))
    )
    args = parser.parse_args()
    import torch

    caps = ["default", "avx2"] + (["avx512"] if "avx512" in torch.backends.cpu.get_cpu_capability().lower() else [])
    settings = {f"ATEN_CPU_CAPABILITY={c}": ({"ATEN_CPU_CAPABILITY": c}, "") for c in caps}
    settings.update({"1 thread": ({"OMP_NUM_THREADS": "1"}, ""), "2 threads": ({"OMP_NUM_THREADS": "2"}, "")})
    settings["mkldnn off"] = ({}, PRELUDE["mkldnn off"])
    changes = {
        "trainer.learning_rate x1.01": ((), None),
        "algo.kl_coef 0.05 -> 0.0505": (("algo.kl_coef=0.0505",), None),
        "token-mean over one more token": ((), PRELUDE["token-mean over one more token"]),
    }
    if args.quick:
        settings = dict(list(settings.items())[:2])
        changes = dict(list(changes.items())[1:])
    cache = Path(args.cache)
    print(f"CPU capability here: {torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}")
    rows = []
    for algo in OVERRIDES:
        base = run(cache, algo, {})
        again = run(cache, algo, {})
        rows.append((algo, "the same run again", largest_difference(base, again)))
        for name, (env, prelude) in settings.items():
            rows.append((algo, name, largest_difference(base, run(cache, algo, env, prelude))))
        for name, (extra, prelude) in changes.items():
            if name.startswith("trainer.learning_rate"):
                from omegaconf import OmegaConf

                lr = OmegaConf.select(OmegaConf.load(REPO / "conf" / "model" / "tiny.yaml"), "trainer.learning_rate")
                extra = (f"trainer.learning_rate={lr * 1.01}",)
            rows.append((algo, "CHANGE: " + name, largest_difference(base, run(cache, algo, {}, prelude or "", extra))))
        for algo_, what, diff in rows[-(1 + len(settings) + len(changes)) :]:
            print(f"{algo_:20s} {what:40s} {diff:.3e}", flush=True)
    print()
    drift = max(d for _, w, d in rows if not w.startswith("CHANGE"))
    change = min(d for _, w, d in rows if w.startswith("CHANGE"))
    print(f"largest drift from arithmetic alone: {drift:.3e}; smallest real change: {change:.3e}")


if __name__ == "__main__":
    main()
