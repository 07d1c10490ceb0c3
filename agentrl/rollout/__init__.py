"""Playing policies on environments: the text of one agent turn (`prompts`), a reply parsed into an action
(`parsing`), the lockstep collector that plays B groups of N episodes with one batched policy call per turn
(`collector`), the step rows and episode results it yields and their metrics (`batch`), the policies it calls: a
model through HF `generate` or a random baseline (`policies`), vLLM inside training or for `agentrl eval`
(`vllm_policy`, with the installed vLLM build and its weight sync in `vllm_engine`), demonstrations played through
the collector as (prompt, reply) pairs (`demonstrations`), and how widely a model spreads over the admissible
actions (`exploration`). It may import the layers below it (the shared modules at the top of agentrl/, `algos`,
`report`, `envs`) and uses the shared modules and `envs` only; `config` (the prompt templates' names), `models`,
`evaluation` and `train` import it."""
