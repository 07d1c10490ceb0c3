"""A rank that has done its work leaves through `distributed.leave`: it leaves the process group and exits with 0
at once, and nothing it wrote before is lost (docs/architecture.md, "How a rank ends")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

LEAVING_RANK = textwrap.dedent(
    """
    import atexit, logging, sys
    from pathlib import Path
    from agentrl.train import distributed

    folder = Path(sys.argv[1])
    logging.basicConfig(filename=folder / "train.log", level=logging.INFO)
    logging.getLogger("rank").info("the last line of the log")
    atexit.register(lambda: (folder / "finalized").write_text("the interpreter's exit ran"))

    class Accelerator:
        num_processes = 1  # one rank: no barrier before it leaves

        def end_training(self):
            (folder / "left").write_text("end_training")

    sys.stdout.write("stdout without a newline")  # buffered: only a flush gets it out
    sys.stderr.write("stderr without a newline")
    distributed.leave(Accelerator())
    (folder / "after").write_text("leave returned")
    """
)


def test_a_rank_leaves_its_group_flushes_and_skips_the_interpreters_exit(tmp_path: Path):
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a rank's streams are
    done = subprocess.run(
        [sys.executable, "-c", LEAVING_RANK, str(tmp_path)], env=buffered, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("stdout without a newline")
    assert "stderr without a newline" in done.stderr
    assert "the last line of the log" in (tmp_path / "train.log").read_text()
    assert (tmp_path / "left").read_text() == "end_training", "the process group is left"
    assert not (tmp_path / "after").exists(), "leave does not return"
    assert not (tmp_path / "finalized").exists(), "the interpreter's finalization is skipped"
