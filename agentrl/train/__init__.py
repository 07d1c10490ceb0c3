"""The training jobs, the layer below the CLI. `agentrl train` (`run`: setup, train, finish) drives `AgentTrainer`
(`trainer`), TRL's GRPOTrainer fed with multi-turn step rows, with its log-prob passes (`logprobs`) and
mini-batch schedule (`schedule`); one iteration's work without TRL: tasks, rollout metrics, replay, advantages
(`iteration`), rows to TRL's tensors (`batching`), the optimizer updates (`update`), what the loss passes saw
(`loss_metrics`), checkpoints (`checkpointing`), evaluation and metrics per iteration (`callbacks`), the task
stream (`sampler`), stopping on a signal (`stopping`), several ranks (`distributed`), and TRL's and vLLM's
options (`trl_config`, `vllm_options`, `vllm_hooks`). `agentrl sft` (`sft`) is the other job: behaviour cloning
from an environment's expert, with held-out success before and after. It may import every layer below it: the
shared modules, `algos`, `report`, `envs`, `rollout`, `config`, `models`, `memory` and `evaluation`; only the
CLI imports it."""
