"""Where a policy's weights and tokenizer come from, and what is done to them before training: loading a folder, a
hub id, the embedded tiny model or a registry model (`load`); building the tiny model, its tokenizer and warm-up
(`tiny`); Qwen2.5-shaped folders with random weights (`qwen_shapes`) and a tokenizer of Qwen2.5's size (`qwen_tokenizer`); LoRA adapters through PEFT (`lora`); and
supervised fine-tuning on (prompt, reply) pairs (`fine_tune`: `agentrl sft` and the tiny model's warm-up). It may
import the shared modules, `envs`, `rollout` (the warm-up plays episodes) and `config`; training, evaluation and
the CLI import it. The registry models' catalogue and conversion stay in agentrl/registry_models.py, below the
schema, which takes their names from it."""
