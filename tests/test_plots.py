"""A run's curves.png: the learning curves, and the step-credit panels under them where the run logged them."""

from __future__ import annotations

import json
import struct

from agentrl.report.curves import plot_run


def png_size(path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the IHDR chunk
    return width, height


def write_run(folder, credit: bool):
    folder.mkdir()
    records = []
    for it in range(4):
        r = {"iteration": it, "rollout/success": 0.1 * it, "train/loss": 1.0 - 0.1 * it}
        if credit:
            r |= {"credit/step_group_size_1_share": 0.3, "credit/step_advantage_nonzero_share": 0.5}
            r["credit/episode_step_advantage_correlation"] = None  # undefined at every iteration: "not logged"
        records.append(r)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_the_credit_panels_are_drawn_under_the_curves_only_where_logged(tmp_path):
    plain = plot_run(write_run(tmp_path / "grpo_before", credit=False))
    with_credit = plot_run(write_run(tmp_path / "grpo_now", credit=True))
    assert plain.read_bytes().startswith(b"\x89PNG") and with_credit.read_bytes().startswith(b"\x89PNG")
    (w0, h0), (w1, h1) = png_size(plain), png_size(with_credit)
    assert w0 == w1 and h1 > 1.5 * h0  # a second row of panels


def test_a_run_that_logged_nothing_draws_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    assert plot_run(tmp_path / "empty") is None
