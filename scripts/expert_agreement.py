"""How closely a model imitates its environment's expert: does a clone read the state, or only the expert's marginal?

    python scripts/expert_agreement.py <model folder>... --overrides +experiment=gem_2048

The expert (the suite's `expert_plan`, as `agentrl sft` plays it) plays the first `--episodes` held-out tasks; on
each turn of the episodes it wins, the model scores the expert's reply, teacher-forced as `agentrl sft` trains it
(the reply's tokens and the end of sequence, the prompt cut to rollout.max_prompt_tokens). Per model it prints the
mean probability of the expert's reply and the mean cross-entropy in nats, beside the context-blind reference: the
entropy of the expert's replies over those turns, the lowest cross-entropy a policy that ignores the state can
reach. A clone at that entropy has learned the expert's marginal, not its policy; held-out success, which a few
repeated bad moves can sink, does not tell the two apart.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def blind_cross_entropy(replies: list[str]) -> float:
    """The entropy (nats) of the replies' frequencies: the cross-entropy of the best context-blind predictor."""
    counts = Counter(replies)
    return -sum(n / len(replies) * math.log(n / len(replies)) for n in counts.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", type=Path, nargs="+", help="model folders (an agentrl sft model, a checkpoint)")
    parser.add_argument("--episodes", type=int, default=40, help="held-out episodes the expert plays")
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides: the environment, at least")
    args = parser.parse_args()

    from hydra.errors import HydraException

    from agentrl.config.store import compose_config
    from agentrl.envs.registry import make_suite
    from agentrl.errors import user_errors
    from agentrl.evaluation.held_out import evaluation_split, evaluation_tasks
    from agentrl.models.fine_tune import reply_log_probs
    from agentrl.models.load import load_model, load_tokenizer
    from agentrl.rollout.demonstrations import ExpertPolicy, play, won_pairs
    from agentrl.train.sft import require_expert

    try:
        cfg = compose_config("sft", args.overrides)
    except HydraException as error:
        sys.exit(f"--overrides: {str(error).splitlines()[0]}")
    for folder in args.models:
        if not (folder / "config.json").is_file():
            sys.exit(f"{folder}: not a model folder (no config.json)")
    with user_errors():
        suite = make_suite(cfg.env, faults=False)
        require_expert(suite, cfg.env.name)
        tasks = evaluation_tasks(suite, evaluation_split(cfg.eval, suite), args.episodes)
        batch = play(suite, cfg.env, ExpertPolicy(suite), tasks, "the expert plays held-out tasks")
    pairs = won_pairs(batch)  # the turns `agentrl sft` would train on: those of the episodes the expert won
    won = sum(e.won for e in batch.episodes)
    blind = blind_cross_entropy([reply for _, reply in pairs])
    print(f"the expert: won {won} of {len(tasks)} held-out episodes; their {len(pairs)} turns scored")
    print(f"context-blind reference: cross-entropy {blind:.3f} nats (the entropy of the expert's replies)")
    print("model | P(expert's reply) | cross-entropy (nats)")
    for folder in args.models:
        model = load_model(str(folder))
        model.eval()
        replies = reply_log_probs(model, load_tokenizer(str(folder)), pairs, cfg.rollout.max_prompt_tokens)
        scores = [sum(tokens) for tokens in replies]
        mean_p = sum(math.exp(s) for s in scores) / len(scores)
        print(f"{folder} | {mean_p:.3f} | {-sum(scores) / len(scores):.3f}", flush=True)


if __name__ == "__main__":  # the expert's play may start worker processes, which import this module
    main()
