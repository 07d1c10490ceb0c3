"""Send a signal at a chosen phase of a chosen iteration, so that the signal tests stop a run exactly where they
mean to (a timer could land in either phase). The real code paths run unchanged; only these three methods are
wrapped to send the signal first.

    python tests/train/signal_in_phase.py rollout|update ITERATION SIGNAL train <overrides...>

rollout: at the second turn of that iteration's rollout; update: at its first micro-batch's loss. The signal goes to
this process. With several ranks, tests/train/signal_hooks/sitecustomize.py instruments rank 0 the same way
and sends the signal to the launching process, as a scheduler would."""

from __future__ import annotations

import os
import signal
import sys


def instrument(phase: str, iteration: int, signum: int, target_pid: int) -> None:
    from agentrl.rollout import policies
    from agentrl.train import trainer as trainer_module

    Trainer = trainer_module.AgentTrainer
    rollout = {"turns": 0, "on": False}

    def number(trainer) -> int:
        return trainer.state.global_step + 1

    original_rollout, original_act, original_loss = Trainer._rollout, policies.HFPolicy.act, Trainer._compute_loss
    updated = set()  # the iterations whose update has begun

    def watched_rollout(self, tasks, group_size, lockstep=None):
        rollout.update(on=lockstep is not None and number(self) == iteration, turns=0)
        try:
            return original_rollout(self, tasks, group_size, lockstep)
        finally:
            rollout["on"] = False

    def watched_act(self, turns):
        if phase == "rollout" and rollout["on"] and turns:
            rollout["turns"] += 1
            if rollout["turns"] == 2:
                os.kill(target_pid, signum)
        return original_act(self, turns)

    def watched_loss(self, model, inputs):
        if phase == "update" and model.training and number(self) == iteration and iteration not in updated:
            updated.add(iteration)
            os.kill(target_pid, signum)
        return original_loss(self, model, inputs)

    Trainer._rollout, policies.HFPolicy.act, Trainer._compute_loss = watched_rollout, watched_act, watched_loss


def main() -> None:
    phase, iteration, signum, args = sys.argv[1], int(sys.argv[2]), signal.Signals[sys.argv[3]], sys.argv[4:]
    instrument(phase, iteration, signum, os.getpid())
    from agentrl.cli import app

    app(args, prog_name="agentrl")


if __name__ == "__main__":
    main()
