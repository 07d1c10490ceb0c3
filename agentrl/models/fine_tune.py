"""Supervised fine-tuning on (prompt, reply) pairs with TRL's `SFTTrainer`: the one way agentrl warm-starts a model.

Two callers: `agentrl sft`, behaviour cloning from an environment's expert (agentrl/train/sft.py), and the tiny
model's warm-up on random admissible play (agentrl/models/tiny.py).

Each pair is tokenized as RL sees and produces it. The prompt is `chat_prompt_ids`: the model's chat template around
one user turn with the generation prompt, cut to its last `max_prompt_tokens` ids as in a rollout. The reply is its
own ids followed by the end-of-turn id that `HFPolicy` stops at. The pairs reach `SFTTrainer` tokenized, as
`input_ids` and `labels` that ignore the prompt's ids, so the loss covers the reply tokens only (TRL's `SFTTrainer`
trains on a `labels` column as given). TRL's own tokenization of conversational prompt-completion pairs is not used,
for two reasons. Its `max_length` cuts a sequence's end, which is the reply, where a rollout cuts the prompt's
start. And it would train on the chat template's text after the end-of-turn token ("\\n" in ChatML), which
generation never produces.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

IGNORED = -100  # the label of a token outside the loss (transformers' and TRL's convention)


@dataclass(frozen=True)
class Schedule:
    """How long and how fast: optimizer steps of `batch_size` pairs at a constant learning rate."""

    steps: int
    batch_size: int
    learning_rate: float
    seed: int
    max_prompt_tokens: int
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0


def pair_ids(tokenizer, prompt: str, reply: str, max_prompt_tokens: int) -> tuple[list[int], list[int]]:
    """(input ids, completion mask) of one pair: 0 over the prompt's ids, 1 over the reply's and its end token."""
    from agentrl.rollout.policies import chat_prompt_ids

    prompt_ids = chat_prompt_ids(tokenizer, prompt, max_prompt_tokens)
    reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return prompt_ids + reply_ids, [0] * len(prompt_ids) + [1] * len(reply_ids)


def reply_log_probs(model, tokenizer, pairs: Sequence[tuple[str, str]], max_prompt_tokens: int) -> list[list[float]]:
    """Each reply's per-token log-probabilities given its prompt under `model`, teacher-forced as fine-tuning scores
    them (`pair_ids`: the reply's tokens and its end token, the prompt cut to `max_prompt_tokens`)."""
    import torch

    scores = []
    with torch.no_grad():
        for ids, mask in pairs_ids(tokenizer, pairs, max_prompt_tokens):
            tokens = torch.tensor([ids])
            log_probs = model(tokens).logits[0, :-1].log_softmax(-1)
            picked = log_probs.gather(-1, tokens[0, 1:, None])[:, 0]
            scores.append(picked[torch.tensor(mask[1:], dtype=torch.bool)].tolist())
    return scores


def pairs_ids(tokenizer, pairs: Sequence[tuple[str, str]], max_prompt_tokens: int) -> list[tuple[list[int], list[int]]]:
    """`pair_ids` of every pair, with one batched call for the prompts (`chat_prompts_ids`) and one for the distinct
    replies (the tiny model's tens of thousands of pairs took 0.6 ms each one by one; they hold about 80 distinct
    replies)."""
    from agentrl.rollout.policies import chat_prompts_ids

    prompt_ids = chat_prompts_ids(tokenizer, [prompt for prompt, _ in pairs], max_prompt_tokens)
    replies = list(dict.fromkeys(reply for _, reply in pairs))
    ids_of_reply = dict(zip(replies, tokenizer(replies, add_special_tokens=False)["input_ids"]))
    encoded = []
    for prompt, (_, reply_text) in zip(prompt_ids, pairs):
        reply = [*ids_of_reply[reply_text], tokenizer.eos_token_id]
        encoded.append((prompt + reply, [0] * len(prompt) + [1] * len(reply)))
    return encoded


def encoded_pairs(tokenizer, pairs: Sequence, max_prompt_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(input ids, completion mask) of each pair: text pairs tokenized here (`pairs_ids`); the tool route's come as
    (ids, completion mask) already, as its rollout wrote them."""
    return pairs_ids(tokenizer, pairs, max_prompt_tokens) if pairs and isinstance(pairs[0][0], str) else list(pairs)


def pair_dataset(tokenizer, pairs: Sequence[tuple[str, str]], max_prompt_tokens: int):
    """The pairs as a `datasets.Dataset` of `input_ids` and `labels` (IGNORED over the prompt), the form TRL trains
    on as given: it builds those labels from a `completion_mask` itself, in a pass over every row (6 s for the tiny
    model's warm-up)."""
    from datasets import Dataset

    encoded = encoded_pairs(tokenizer, pairs, max_prompt_tokens)
    labels = [[token if scored else IGNORED for token, scored in zip(ids, mask)] for ids, mask in encoded]
    return Dataset.from_dict({"input_ids": [ids for ids, _ in encoded], "labels": labels})


def sft_config(schedule: Schedule, output_dir: str, device: str = "cpu", precision: str = "fp32"):
    """TRL's `SFTConfig` for a schedule; every value that differs from TRL's default says why."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=output_dir,
        max_steps=schedule.steps,
        per_device_train_batch_size=schedule.batch_size,
        gradient_accumulation_steps=1,
        learning_rate=schedule.learning_rate,
        lr_scheduler_type="constant",  # as RL's schedule (train/trl_config.py): one learning rate to reason about
        warmup_steps=0,
        weight_decay=schedule.weight_decay,
        max_grad_norm=schedule.max_grad_norm,
        seed=schedule.seed,
        completion_only_loss=True,  # the loss covers the reply (the action) only: pair_dataset's labels say which
        max_length=None,  # already cut, at the prompt's start (pair_ids)
        packing=False,
        gradient_checkpointing=False,  # TRL's default is on; these sequences are short, the memory not needed
        use_cpu=device == "cpu",
        bf16=precision == "bf16",  # TRL's default is bf16 on; on CPU agentrl trains in fp32
        fp16=precision == "fp16",
        logging_steps=1,  # every step's loss reaches the progress line and the returned losses
        save_strategy="no",  # the caller saves the model it gets back
        report_to="none",
        disable_tqdm=True,  # agentrl's own progress (progress.Phase)
        dataloader_num_workers=0,
    )


def full_logits_trainer(sft_trainer_class):
    """`SFTTrainer` with transformers' own `Trainer.compute_loss`: the model's loss from its full logits, the sum of
    the reply tokens' negative log-likelihoods divided by their count, as TRL's.

    The tiny model's warm-up trains this way on a CPU (`sft_trainer(full_logits=True)`). TRL 1.16 computes the loss
    with its fused LM head, which scores the positions in tiles without the full logits: built for accelerators and
    large vocabularies. On a CPU, where it has no Triton kernel, it scores every position, the prompt's too, and
    recomputes each tile in the backward pass: half of a tiny-model warm-up step went there (docs/sft.md,
    "Deviations"). The gradients are the same (tests/test_supervised.py); TRL's entropy and token accuracy metrics,
    which agentrl does not read, are not logged. TRL's compact path (`agentrl/fused_head.py`), which `agentrl sft`
    takes, was faster still for the warm-up, but the tiny model it built at two threads learned less
    (docs/architecture.md, "The warm start"): the default's measured curve rests on the full-logits build."""
    from transformers import Trainer

    class FullLogitsSFTTrainer(sft_trainer_class):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            inputs = {**inputs, "use_cache": False}  # as TRL's: no key/value cache in a training forward
            return Trainer.compute_loss(self, model, inputs, return_outputs, num_items_in_batch)

    return FullLogitsSFTTrainer


def sft_trainer(
    model,
    tokenizer,
    pairs,
    schedule: Schedule,
    output_dir: str,
    *,
    device="cpu",
    precision="fp32",
    peft_config=None,
    callbacks=(),
    full_logits=False,
):
    """TRL's `SFTTrainer` on the pairs, with agentrl's progress instead of transformers' printed logs. Its loss comes
    from TRL's fused LM head over the reply's positions only, on a CPU too (`agentrl/fused_head.py`); with
    `full_logits` on a CPU, from the model's own full logits instead (`full_logits_trainer`: the tiny model's
    warm-up)."""
    import datasets
    from transformers import PrinterCallback
    from trl import SFTTrainer

    from agentrl.fused_head import score_completion_only

    datasets.disable_progress_bars()  # TRL's dataset passes would draw one bar per call
    if device == "cpu" and full_logits:
        trainer_class = full_logits_trainer(SFTTrainer)
    else:
        trainer_class = SFTTrainer
        score_completion_only()  # TRL's compact path on a CPU as on a GPU: the prompt's positions are not projected
    trainer = trainer_class(
        model=model,
        args=sft_config(schedule, output_dir, device, precision),
        train_dataset=pair_dataset(tokenizer, pairs, schedule.max_prompt_tokens),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=list(callbacks),
    )
    trainer.remove_callback(PrinterCallback)  # transformers prints every log dict when there is no progress bar
    return trainer


def fine_tune(
    model,
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    schedule: Schedule,
    *,
    device: str = "cpu",
    precision: str = "fp32",
    peft_config=None,
    doing: str = "supervised fine-tuning",
    full_logits: bool = False,
):
    """Train `model` on the pairs' replies for `schedule.steps` steps; returns (the model, each step's loss).

    With a `peft_config` TRL trains a LoRA adapter, which is merged into the returned model, so that it saves
    and loads as plain weights. `full_logits`: on a CPU, the loss from the full logits (`sft_trainer`)."""
    from transformers import TrainerCallback

    from agentrl.progress import Phase

    losses: list[float] = []
    if schedule.steps <= 0 or not pairs:
        return model, losses
    was_padding_side = tokenizer.padding_side
    with tempfile.TemporaryDirectory() as scratch, Phase(f"{doing}: step", schedule.steps) as phase:

        class Progress(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "loss" in logs:
                    losses.append(float(logs["loss"]))
                    phase.advance(note=f"loss {logs['loss']:.3f}")

        trainer = sft_trainer(
            model,
            tokenizer,
            pairs,
            schedule,
            scratch,
            device=device,
            precision=precision,
            peft_config=peft_config,
            callbacks=[Progress()],
            full_logits=full_logits,
        )
        trainer.train()
        trained = trainer.model
    tokenizer.padding_side = was_padding_side  # generation pads on the left (models.load_tokenizer)
    if peft_config is not None:
        trained = trained.merge_and_unload()
    trained.eval()
    return trained, losses
