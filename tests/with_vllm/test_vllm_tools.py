"""The tool-calling route (env=tools) on TRL's colocated vLLM engine: the engine samples each turn from the ids of
the conversation so far (the chat template's, extended by the sampled ids and the tool messages'), the rows train on
exactly those ids, and the engine's log-probs of them match the trainer's; rows generated ahead
(rollout.max_staleness=1) keep the log-probs of the version that sampled them."""

from __future__ import annotations

import json

from tests.train.test_resume import GAME_2048
from tests.with_vllm.conftest import NEEDS_VLLM, VLLM

pytestmark = NEEDS_VLLM
GAP = 1e-4  # |trainer - vLLM| per-token log-prob, both float32 (tests/with_vllm/test_vllm_colocate.py)


def test_the_tool_route_trains_on_the_colocated_engine_with_rows_generated_ahead(run_cli, tmp_path):
    run = tmp_path / "run"
    result = run_cli(
        "train",
        "+debug=fast",
        "logger=none",
        *GAME_2048,
        "+algo=gigpo",
        "rollout.max_staleness=1",
        *VLLM,
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "train/loss" in r]
    assert [r["iteration"] for r in trained] == [1, 2]
    assert all(r["rollout/episode_length"] > 1 for r in trained), "several turns an episode"
    assert all(r["rollout/tool_calls"] > 0 and "rollout/tool_errors" in r for r in trained)
    # the rows' ids are the ones the engine sampled and was conditioned on: iteration 1's rows come from the weights
    # the trainer still holds, and its log-probs of them are the engine's, turn after turn of the conversation;
    # iteration 2 trains on rows sampled before update 1, which keep the engine's log-probs of that version
    gaps = [r["rollout/vllm_logp_gap_max"] for r in trained]
    assert [r["async/staleness"] for r in trained] == [0.0, 1.0]
    assert gaps[0] < GAP and gaps[1] > 100 * GAP, gaps
    assert "eval/success" in records[-1] and (run / "checkpoints" / "last" / "model.safetensors").is_file()
