"""hardware=slurm: submitit's launcher, with its checkpoint-and-requeue resuming the job where it stopped.

Slurm warns a job before its time limit (and on preemption, where the cluster is set up so) with submitit's
signal, USR2 by default. submitit then calls the job's `checkpoint` method and requeues what it returns. The
training catches the signal first (agentrl/train/stopping.py): it finishes the iteration in progress, writes a
checkpoint, and only then hands the signal on to submitit's handler. `checkpoint` here returns the same job with
`trainer.resume=auto`, so the requeued job goes on from that checkpoint instead of starting again.

conf/hardware/slurm.yaml names `SlurmLauncher` as Hydra's launcher; `LocalLauncher` is the same on submitit's
local executor (`hydra/launcher=submitit_local hydra.launcher._target_=hydra_plugins.agentrl_requeue.LocalLauncher`),
which is how the requeue path is tested without a cluster. They live here because Hydra instantiates launchers
only from the `hydra_plugins` namespace package; without the sweep extra (no hydra-submitit-launcher) this
module defines nothing, and Hydra's plugin scan passes over it.
"""

from __future__ import annotations

from typing import Any

RESUME = "trainer.resume=auto"


def resumed(overrides: list[str]) -> list[str]:
    """A job's overrides with trainer.resume=auto in place of any trainer.resume it had."""
    kept = [o for o in overrides if not o.lstrip("+~").startswith("trainer.resume=")]
    return [*kept, RESUME]


class _Requeue:
    def checkpoint(self, sweep_overrides: list[str], *args: Any, **kwargs: Any) -> Any:
        """The job submitit requeues after a time-out or preemption: the same, resuming from its checkpoint."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, resumed(list(sweep_overrides)), *args, **kwargs)


try:
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher
except ImportError:  # the sweep extra is not installed: hardware=slurm says so in one line (agentrl/cli/launch.py)
    pass
else:

    class SlurmLauncher(_Requeue, submitit_launcher.SlurmLauncher):
        pass

    class LocalLauncher(_Requeue, submitit_launcher.LocalLauncher):
        pass
