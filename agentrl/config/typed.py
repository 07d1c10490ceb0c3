"""The boundary where a composed config becomes the schema's dataclasses.

Hydra composes a ``DictConfig`` checked against the schema (config/store.py). Before anything is built, the CLI
(cli/jobs.py, cli/launch.py's preflight) turns it into instances of ``TrainConfig``, ``EvalRunConfig`` or
``SftRunConfig`` with OmegaConf's own ``to_object``: every layer below reads typed fields (an enum field is its
``StrEnum`` member, a list a ``list``), never an OmegaConf node. The one exception is the environment of a plug-in
that registers no schema of its own: it gets a read-only copy of its composed ``DictConfig`` section (read by
attribute all the same), since there is no dataclass to build it into. Records write a config back with
``agentrl/run_folder.py: as_container``.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from agentrl.errors import UserError


def typed(cfg: Any) -> Any:
    """A composed config as the schema's dataclasses; one that already is, as it is. Raises UserError for a value
    the config leaves missing (``???``)."""
    if dataclasses.is_dataclass(cfg):
        return cfg
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import MissingMandatoryValue

    try:
        obj = OmegaConf.to_object(cfg)
    except MissingMandatoryValue as err:
        raise UserError(f"{err.full_key} needs a value; set it on the command line ({err.full_key}=...)") from None
    env = cfg.get("env") if isinstance(cfg, DictConfig) else None
    if isinstance(env, DictConfig) and not dataclasses.is_dataclass(OmegaConf.get_type(env)):
        # a plug-in without a schema: a read-only copy of its composed section (the preflight goes on to apply a
        # sweep's other values to the composed config itself)
        obj.env = copy.deepcopy(env)
        OmegaConf.set_readonly(obj.env, True)
    return obj
