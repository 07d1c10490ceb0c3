"""A config's estimated peak memory per device: the formulas, term by term, as pure functions (`plan`), and the
plan read off a composed config, shown by `agentrl config` and enforced by `agentrl train` (`check`). It may import
the shared modules, `config` and `models` (the Qwen2.5 shapes it knows without a download); training and the CLI
import it."""
