"""How a model spreads over the admissible actions: a warm start's room to explore, measured.

Group-relative estimators learn only where the episodes of a group differ. A warm start that plays like the
random admissible policy spreads over the admissible actions and lets RL sharpen it; one that has collapsed onto
one action per state gives groups whose episodes all end alike, and no signal. `AdmissibleProbe` wraps the policy
that plays a check: at each turn it scores every admissible action, as the reply RL parses (`<action>X</action>`
and the end token), under the model, and records

- the entropy of the model's choice renormalised over the admissible actions, divided by log(number of admissible
  actions): 1 for a uniform choice (the random admissible policy), 0 for a deterministic one (turns with fewer
  than two admissible actions are left out);
- the probability mass on the admissible replies: how likely a sampled reply is exactly one of them.

The prompt is run once with its key/value cache; the replies are scored as one batch on that cache.
"""

from __future__ import annotations

import math

import torch

from agentrl.rollout.collector import Reply, Turn
from agentrl.rollout.parsing import format_reply
from agentrl.rollout.policies import chat_prompt_ids


@torch.no_grad()
def reply_logprobs(model, tokenizer, prompt: str, replies: list[str], max_prompt_tokens: int) -> torch.Tensor:
    """log p(reply and its end token | prompt) under `model`, one value per reply (float64)."""
    device = next(model.parameters()).device
    prompt_ids = torch.tensor([chat_prompt_ids(tokenizer, prompt, max_prompt_tokens)], device=device)
    encoded = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for r in replies]
    width = max(len(ids) for ids in encoded)
    ids = torch.full((len(encoded), width), tokenizer.pad_token_id, dtype=torch.long, device=device)
    keep = torch.zeros((len(encoded), width), dtype=torch.bool, device=device)
    for row, reply_ids in enumerate(encoded):  # right padding: the replies continue the shared prompt
        ids[row, : len(reply_ids)] = torch.tensor(reply_ids, device=device)
        keep[row, : len(reply_ids)] = True
    was_training = model.training
    model.eval()
    first = model(input_ids=prompt_ids, use_cache=True)
    cache = first.past_key_values
    cache.batch_repeat_interleave(len(encoded))
    attention = torch.cat(
        [torch.ones((len(encoded), prompt_ids.shape[1]), dtype=torch.long, device=device), keep.long()], 1
    )
    rest = model(input_ids=ids, attention_mask=attention, past_key_values=cache, use_cache=False).logits
    if was_training:
        model.train()
    # the reply's first token is predicted by the prompt's last position, token t by the reply's position t - 1
    logits = torch.cat([first.logits[:, -1:].expand(len(encoded), 1, -1), rest[:, :-1]], 1).double()
    picked = logits.log_softmax(-1).gather(-1, ids[:, :, None])[:, :, 0]
    return (picked * keep).sum(1).cpu()


def admissible_spread(logprobs: torch.Tensor) -> tuple[float, float]:
    """(normalised entropy, probability mass) of a model's choice among n >= 2 admissible replies, given their
    log-probabilities: H(softmax(logprobs)) / log(n), and sum(exp(logprobs))."""
    choice = logprobs.log_softmax(0)
    entropy = -(choice.exp() * choice).sum().item()
    return entropy / math.log(len(logprobs)), logprobs.exp().sum().item()


class AdmissibleProbe:
    """A policy that plays as `policy` does and, at every turn, scores the admissible actions under `model`."""

    def __init__(self, policy, model, tokenizer, max_prompt_tokens: int = 2048):
        self.policy, self.model, self.tokenizer = policy, model, tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.entropies: list[float] = []
        self.masses: list[float] = []

    def act(self, turns: list[Turn]) -> list[Reply]:
        for turn in turns:
            actions = list(dict.fromkeys(turn.observation.admissible_actions))
            if len(actions) < 2:
                continue
            replies = [format_reply(a, turn.reply_format) for a in actions]
            entropy, mass = admissible_spread(
                reply_logprobs(self.model, self.tokenizer, turn.prompt, replies, self.max_prompt_tokens)
            )
            self.entropies.append(entropy)
            self.masses.append(mass)
        return self.policy.act(turns)

    def summary(self) -> dict[str, float]:
        """Means over the scored turns (NaN where no turn had two admissible actions)."""
        turns = len(self.entropies)
        return {
            "admissible_entropy": sum(self.entropies) / turns if turns else math.nan,
            "admissible_mass": sum(self.masses) / turns if turns else math.nan,
        }
