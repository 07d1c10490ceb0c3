"""The structured config schema: every key agentrl reads, with its type, default and valid values, one module per
section (`run`: train and eval runs, hardware, rollout, trainer; `envs`; `model`; `algo`; `sft`), the values a key
may take (`values`), their registration in Hydra's ConfigStore (`store`), the boundary where a composed config
becomes the schema's dataclasses that every layer above reads (`typed`), and the checks of those values and of the
rules between fields (`checks`). Every number and string states its valid values beside it (``valid(...)``), so that
an unknown key or a value of the wrong type fails at composition time and a bad value before any work. Defaults
follow the papers and reference code (docs/algorithms.md); the embedded tiny-model recipe overrides a few of them in
``conf/model/tiny.yaml``.

It may import the shared modules, `envs` (the environments' levels and plug-in schemas) and `rollout` (the prompt
templates' names), and reads the registry models' names from agentrl/registry_models.py; everything from
`models` upwards imports it."""

# The plug-in contract (docs/environments.md): a plug-in's schema extends `agentrl.config.EnvConfig`, a path
# outside packages import, so it stays here whichever module of the package defines it.
from agentrl.config.envs import EnvConfig

__all__ = ["EnvConfig"]
