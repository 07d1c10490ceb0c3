"""What a failed composition means, in one line that names the override: an unknown key with the keys it may have
meant, an unknown group option with the closest one, a Hydra plugin that is not installed with its extra, an
override whose parent is not set. Hydra's own messages span several lines and suggest nothing; the close matches
(difflib) come from the node OmegaConf's error carries, without composing again."""

from __future__ import annotations

import difflib

from agentrl.errors import first_line

# Hydra plugins that agentrl's configs name, and the agentrl extra that installs them (Hydra cannot know it).
_PLUGIN_EXTRAS = dict.fromkeys(
    ("hydra/sweeper/optuna", "hydra/launcher/submitit_slurm", "hydra/launcher/submitit_local"), "sweep"
)


def explain(err: Exception, config_name: str, lines: list[str]) -> str:
    """Hydra's or OmegaConf's composition error as one line that names the override."""
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

    cause = err if isinstance(err, OmegaConfBaseException) else (err.__cause__ or err)
    missing = next((e for e in (err, cause) if isinstance(e, MissingConfigException)), None)
    if missing is not None:
        return _missing_option(missing)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and cause.full_key:
        return f"unknown config key '{cause.full_key}'{_close_keys(cause)}"
    if isinstance(cause, ValidationError):
        message = first_line(getattr(cause, "msg", str(cause)))
        return f"{cause.full_key}: {message}" if cause.full_key else message
    if isinstance(err, HydraException):
        return " ".join(str(err).split())  # Hydra names the override, and its advice follows on the next lines
    return _unset_parent(config_name, lines) or first_line(err)


def _missing_option(missing) -> str:
    """An unknown group option, with the closest one and the list; a missing plugin, with its extra."""
    from hydra.core.global_hydra import GlobalHydra

    path = getattr(missing, "missing_cfg_file", "") or ""
    if "/" not in path:
        return first_line(str(missing))
    group, option = path.rsplit("/", 1)
    if path in _PLUGIN_EXTRAS:
        extra = _PLUGIN_EXTRAS[path]
        return f"{group}={option} needs a Hydra plugin that is not installed: pip install 'agentrl[{extra}]'"
    if group == "env":  # an installed plug-in of that name that failed to load: say why, not "unknown"
        from agentrl.envs.registry import plugin_problems

        why = next((line for line in plugin_problems() if line.startswith(f"plug-in {option!r} ")), None)
        if why is not None:
            return f"env={option}: {why}"
    loader = GlobalHydra.instance().config_loader()
    options = sorted(o for o in loader.get_group_options(group) if not o.endswith("_schema"))
    hint = difflib.get_close_matches(option, options, n=1)
    close = f" (did you mean {hint[0]}?)" if hint else ""
    return f"unknown option '{option}' for {group}{close}; available: {', '.join(options) or 'none'}"


def _close_keys(err) -> str:
    """'; did you mean trainer.learning_rate?' from the keys of the node the unknown key was looked up in."""
    from omegaconf import DictConfig

    parent = err.parent_node
    if not isinstance(parent, DictConfig):
        return ""
    parent_path, _, leaf = err.full_key.rpartition(".")
    keys = [str(k) for k in parent.keys() if parent_path or k != "hydra"]  # a job config has no hydra node
    matches = difflib.get_close_matches(leaf, keys, n=3, cutoff=0.5)
    prefix = f"{parent_path}." if parent_path else ""
    if matches:
        return "; did you mean " + " or ".join(prefix + m for m in matches) + "?"
    return f"; valid keys under {parent_path or 'the top level'}: {', '.join(keys)}"


def _unset_parent(config_name: str, lines: list[str]) -> str | None:
    """For the error OmegaConf raises without a key (an assertion, when an override's parent is null): the
    first value override whose parent is not a mapping once the groups are chosen. One more compose."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import DictConfig, OmegaConf

    loader = GlobalHydra.instance().config_loader()
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
        groups = [o for o in parsed if loader.get_group_options(o.key_or_group)]
        cfg = compose(config_name=config_name, overrides=[o.input_line for o in groups], return_hydra_config=True)
    except Exception:
        return None
    choices = cfg.hydra.runtime.choices
    for override in parsed:
        parent = override.key_or_group.rpartition(".")[0]
        if override in groups or not parent or override.is_hydra_override():
            continue
        if not isinstance(OmegaConf.select(cfg, parent), DictConfig):
            top = parent.split(".", 1)[0]
            chosen = f" with {top}={choices[top]}" if top in choices else ""
            return f"'{override.input_line}' cannot apply: '{parent}' is not set{chosen}"
    return None
