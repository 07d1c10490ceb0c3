"""The maths of the RL algorithms, as pure functions on numpy arrays and torch tensors: GRPO's and RLOO's
episode-level advantages (`grpo`), GiGPO's step returns, step level and combined advantage (`gigpo`) over its
anchor-state step groups (`step_groups`, with `similarity_clusters` for texts grouped by similarity), the
per-segment arithmetic and input checks they share (`segments`), the step-credit diagnostics (`credit_diagnostics`),
ARPO's replay buffer (`replay`), the PPO-clip policy loss and KL (`policy_loss`) and the entropy term, plain or
EPO-smoothed (`entropy`). Each function's docstring gives the paper's equation it computes (docs/algorithms.md).
It imports nothing of agentrl outside `algos/` (tests/test_architecture.py checks this), only the standard
library, numpy and torch, so it sits right above the shared modules; training imports it, and `report` reads the
step-credit diagnostics' names from it."""
