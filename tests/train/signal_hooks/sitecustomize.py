"""On PYTHONPATH of a two-rank signal test: rank 0 sends AGENTRL_TEST_SIGNAL ("PHASE ITERATION SIGNAL") to the
launching process at that phase (tests/train/signal_in_phase.py). Every other process is left alone."""

import os

if os.environ.get("AGENTRL_TEST_SIGNAL") and os.environ.get("RANK") == "0":
    import signal
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from signal_in_phase import instrument

    _phase, _iteration, _signal = os.environ["AGENTRL_TEST_SIGNAL"].split()
    instrument(_phase, int(_iteration), signal.Signals[_signal], int(os.environ["AGENTRL_LAUNCHER_PID"]))
