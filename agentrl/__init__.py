"""agentrl: config-driven reinforcement learning for LLM agents in multi-turn environments.

The package's folders are its import layers, lowest first (docs/architecture.md, "Import layers"): the shared
modules at this top level (errors, caches, checkpoints, run folders, metrics, progress, tracking), then `algos`,
`report`, `envs`, `rollout`, `config`, `models`, `memory`, `evaluation`, `train` and `cli`; a module imports only
from its own layer or lower ones. This file imports nothing, so importing any part of agentrl loads only that part.
"""

__version__ = "0.1.0"
