"""Supervised fine-tuning on TRL's SFTTrainer (agentrl/models/fine_tune.py): the prompt is masked out of the loss, the
prompt ids are RL's, training raises the replies' likelihood, and a LoRA adapter comes back merged."""

from __future__ import annotations

import pytest
import torch

from agentrl.models.fine_tune import IGNORED, Schedule, fine_tune, pair_ids, pairs_ids, sft_trainer
from agentrl.models.tiny import build_tokenizer
from agentrl.rollout.policies import chat_prompt_ids

PAIRS = [
    (f"Task: put a {thing} in the fridge. You see a {place}. Actions: go to fridge 1, take {thing}", reply)
    for thing, place, reply in [
        ("apple", "table", "<action>take apple from table 1</action>"),
        ("egg", "shelf", "<action>go to fridge 1</action>"),
        ("mug", "desk", "<action>open fridge 1</action>"),
        ("cup", "sink", "<action>take cup from sinkbasin 1</action>"),
    ]
]


@pytest.fixture(scope="module")
def tokenizer():
    texts = [p for p, _ in PAIRS] + [r for _, r in PAIRS]
    return build_tokenizer(texts * 4, 400)


def _model(tokenizer, seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen2ForCausalLM(config)


def _schedule(**kw):
    return Schedule(**{"steps": 30, "batch_size": 4, "learning_rate": 3e-3, "seed": 0, "max_prompt_tokens": 64, **kw})


def reply_logprob(model, tokenizer, pairs) -> float:
    """Mean log-probability of the reply tokens (their end token included) given RL's prompt ids."""
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for prompt, reply in pairs:
            ids, mask = pair_ids(tokenizer, prompt, reply, 64)
            logits = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
            targets = torch.tensor(ids[1:])
            picked = logits.gather(-1, targets[:, None])[:, 0]
            keep = torch.tensor(mask[1:], dtype=torch.bool)
            total += picked[keep].sum().item()
            count += int(keep.sum())
    return total / count


def test_pair_ids_are_rls_prompt_then_the_reply_and_its_end_token(tokenizer):
    prompt, reply = PAIRS[0]
    ids, mask = pair_ids(tokenizer, prompt, reply, 64)
    prompt_ids = chat_prompt_ids(tokenizer, prompt, 64)
    assert ids[: len(prompt_ids)] == prompt_ids and mask[: len(prompt_ids)] == [0] * len(prompt_ids)
    assert ids[-1] == tokenizer.eos_token_id and set(mask[len(prompt_ids) :]) == {1}
    assert tokenizer.decode(ids[len(prompt_ids) : -1]) == reply
    # a long prompt keeps its end, as a rollout does; the reply is never cut
    short_ids, short_mask = pair_ids(tokenizer, prompt, reply, 5)
    assert short_mask.count(0) == 5 and short_ids[:5] == prompt_ids[-5:] and short_mask.count(1) == mask.count(1)


def test_batched_ids_are_the_one_by_one_ids(tokenizer):
    long_prompt = (PAIRS[0][0] + " ") * 6  # cut at its start, as one by one
    pairs = [*PAIRS, (long_prompt, "<action>look</action>")]
    for budget in (5, 64, 10_000):
        assert pairs_ids(tokenizer, pairs, budget) == [pair_ids(tokenizer, p, r, budget) for p, r in pairs]


def test_the_trainers_labels_mask_the_prompt_and_keep_the_reply(tokenizer, tmp_path):
    trainer = sft_trainer(_model(tokenizer), tokenizer, PAIRS, _schedule(), str(tmp_path))
    batch = next(iter(trainer.get_train_dataloader()))
    expected = {tuple(pair_ids(tokenizer, p, r, 64)[0]) for p, r in PAIRS}
    assert batch["labels"].shape == batch["input_ids"].shape and len(batch["input_ids"]) == 4
    for input_ids, labels, attention in zip(batch["input_ids"], batch["labels"], batch["attention_mask"]):
        length = int(attention.sum())
        ids = input_ids[:length].tolist()
        assert tuple(ids) in expected
        mask = next(pair_ids(tokenizer, p, r, 64)[1] for p, r in PAIRS if pair_ids(tokenizer, p, r, 64)[0] == ids)
        prompt_len = mask.count(0)
        assert (labels[:prompt_len] == IGNORED).all()  # no loss on the prompt
        assert labels[prompt_len:length].tolist() == ids[prompt_len:]  # the loss on the reply and its end token
        assert (labels[length:] == IGNORED).all()  # nor on padding


def test_fine_tuning_raises_the_replies_likelihood_and_changes_every_weight(tokenizer):
    model = _model(tokenizer)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    start = reply_logprob(model, tokenizer, PAIRS)
    model, losses = fine_tune(model, tokenizer, PAIRS, _schedule())
    assert len(losses) == 30 and losses[-1] < losses[0]
    assert reply_logprob(model, tokenizer, PAIRS) > start + 1.0
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []
    assert tokenizer.padding_side == "left"  # generation's padding, as models.load_tokenizer sets it


def test_lora_trains_an_adapter_and_returns_it_merged_into_plain_weights(tokenizer):
    from peft import LoraConfig

    model = _model(tokenizer)
    embed = model.get_input_embeddings().weight.detach().clone()
    q_proj = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    start = reply_logprob(model, tokenizer, PAIRS)
    adapter = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
    )
    merged, _ = fine_tune(model, tokenizer, PAIRS, _schedule(learning_rate=1e-2), peft_config=adapter)
    assert type(merged).__name__ == "Qwen2ForCausalLM"  # no PEFT wrapper: saves and loads as a plain model
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert torch.equal(merged.get_input_embeddings().weight, embed)  # outside the adapter: frozen
    assert not torch.equal(merged.model.layers[0].self_attn.q_proj.weight, q_proj)  # the adapter, merged in
    assert reply_logprob(merged, tokenizer, PAIRS) > start


def test_no_steps_or_no_pairs_leave_the_model_as_it_is(tokenizer):
    model = _model(tokenizer)
    assert fine_tune(model, tokenizer, PAIRS, _schedule(steps=0)) == (model, [])
    assert fine_tune(model, tokenizer, [], _schedule()) == (model, [])


def _first_step_gradients(trainer) -> dict[str, torch.Tensor]:
    """Every parameter's gradient at the first optimizer step (before clipping is applied to the weights)."""
    from transformers import TrainerCallback

    grads: dict[str, torch.Tensor] = {}

    class Grab(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if not grads:
                grads.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})

    trainer.add_callback(Grab())
    trainer.train()
    return grads


def test_on_cpu_both_loss_paths_have_trls_gradients(tokenizer, tmp_path):
    """On a CPU `agentrl sft` takes TRL's compact path (the reply's positions only) and the tiny model's warm-up the
    model's own loss from the full logits (`full_logits=True`); both give TRL's first step: the whole data set is
    one batch, so every trainer sees the same rows."""
    from trl import SFTTrainer

    from agentrl.models.fine_tune import pair_dataset, sft_config

    schedule = _schedule(steps=1, batch_size=len(PAIRS))
    full = sft_trainer(_model(tokenizer), tokenizer, PAIRS, schedule, str(tmp_path / "full"), full_logits=True)
    assert type(full).__name__ == "FullLogitsSFTTrainer"
    compact = sft_trainer(_model(tokenizer), tokenizer, PAIRS, schedule, str(tmp_path / "compact"))
    assert type(compact) is SFTTrainer
    trls = SFTTrainer(
        model=_model(tokenizer),
        args=sft_config(schedule, str(tmp_path / "trl")),
        train_dataset=pair_dataset(tokenizer, PAIRS, schedule.max_prompt_tokens),
        processing_class=tokenizer,
    )
    expected = _first_step_gradients(trls)
    for ours in (full, compact):
        got = _first_step_gradients(ours)
        assert expected.keys() == got.keys() and len(got) > 5
        for name, grad in expected.items():
            assert torch.allclose(got[name], grad, rtol=1e-4, atol=1e-7), name
        assert ours.state.log_history[0]["loss"] == pytest.approx(trls.state.log_history[0]["loss"], rel=1e-5)


def test_on_cpu_sft_projects_the_replies_positions_only(tokenizer, tmp_path):
    """TRL's fused head projects every position where it has no Triton kernel; `agentrl sft` makes it project only
    the positions whose next token is scored (the reply's), as on a GPU, so a prompt of hundreds of tokens is not
    projected through a 49,152-word vocabulary twice a step. The full-logits path does project them all."""
    from tests.train.test_logps_tiles import LargestVocabTensor

    long_prompt = " ".join([PAIRS[0][0]] * 6)  # about 200 prompt tokens against a reply of a dozen
    pairs = [(long_prompt, reply) for _, reply in PAIRS]
    schedule = _schedule(steps=1, batch_size=len(pairs), max_prompt_tokens=10_000)
    rows = pairs_ids(tokenizer, pairs, schedule.max_prompt_tokens)
    positions, scored = max(len(ids) for ids, _ in rows), sum(sum(mask) for _, mask in rows)
    assert positions > 10 * max(sum(mask) for _, mask in rows)
    largest = {}
    for full_logits in (False, True):
        trainer = sft_trainer(
            _model(tokenizer), tokenizer, pairs, schedule, str(tmp_path / str(full_logits)), full_logits=full_logits
        )
        recorder = LargestVocabTensor(len(tokenizer))
        with recorder:
            trainer.train()
        largest[full_logits] = recorder.largest // len(tokenizer)
    assert largest[False] <= scored  # the reply's positions (each with its end token), no prompt position
    assert largest[True] >= len(pairs) * positions  # every row's every position
