"""The environments: the contract every adapter implements (`base`: tasks, observations, steps, suites), the
registry from `env.name` to the adapter that builds it, the built-ins first, then installed plug-ins
(`registry`, docs/environments.md), the built-in household world and its three-agent team (`household`,
`household_world`, `household_team`, `household_adapter`), the real ALFWorld and ScienceWorld engines (the
`alfworld` and `scienceworld` sub-packages, each behind its extra), the pools that run many episodes'
environments in-process or in worker processes with timeouts and replacement (`workers`, `process_pool`), and
fault injection with the stop on a broken environment (`faults`). Environments are text in, text out and never
see tokens. It may import the layers below it (the shared modules at the top of agentrl/, `algos`, `report`) and
uses only `errors`, `cache` and `progress`; `rollout`, `config` and everything above import it."""
