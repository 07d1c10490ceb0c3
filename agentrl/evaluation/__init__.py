"""Held-out evaluation, its own layer between `memory` and `train`: the training collector with evaluation
sampling on the held-out split (`held_out`), reporting success, return, episode length, invalid-action rate and
pass@k, overall and per task type. Training calls it on schedule (`PeriodicEvaluator`: the `eval/*` metrics),
`agentrl sft` before and after fine-tuning, and `agentrl eval` on a checkpoint or model folder
(`evaluate_from_config`, which writes eval.json and trajectories.jsonl). It may import the layers below it: the
shared modules at the top of agentrl/, `envs`, `rollout` (the collector and the policies), `config` and `models`
(loading the checkpoint's policy and tokenizer); `train` and the CLI import it."""
