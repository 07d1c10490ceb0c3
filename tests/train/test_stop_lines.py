"""What a stop says when its signal arrives (agentrl/train/stopping.py): the phase decides, and an update that ends
with a held-out evaluation says that the evaluation runs before the checkpoint."""

from __future__ import annotations

import signal

from agentrl.train.callbacks import evaluates_at
from agentrl.train.stopping import EVALUATION, ROLLOUT, UPDATE, StopRequest


def _acknowledged(phase: str, iteration: int, evaluates: bool = False, signum=signal.SIGTERM) -> str:
    request = StopRequest(at_once=str)
    request.enter(phase, iteration, evaluates)
    return request.acknowledgement(signum)


def test_an_update_without_an_evaluation_finishes_then_checkpoints():
    assert _acknowledged(UPDATE, 3) == "SIGTERM: finishing the update of iteration 3, then writing a checkpoint"


def test_an_update_that_ends_with_an_evaluation_says_so():
    assert _acknowledged(UPDATE, 4, evaluates=True) == (
        "SIGTERM: finishing the update of iteration 4 and its held-out evaluation, then writing a checkpoint"
    )


def test_a_stop_during_the_evaluation_says_it_finishes_it():
    assert _acknowledged(EVALUATION, 4, signum=signal.SIGINT) == (
        "SIGINT: finishing the held-out evaluation of iteration 4, then writing a checkpoint; "
        "Ctrl-C again stops at once"
    )


def test_a_rollout_is_abandoned_whatever_its_evaluation():
    assert _acknowledged(ROLLOUT, 4, evaluates=True).startswith("SIGTERM: abandoning the rollout of iteration 4")


def test_evaluations_fall_every_eval_every_and_on_the_last_iteration():
    assert [i for i in range(1, 11) if evaluates_at(i, 4, 10)] == [4, 8, 10]
    assert [i for i in range(1, 11) if evaluates_at(i, 0, 10)] == [10]
