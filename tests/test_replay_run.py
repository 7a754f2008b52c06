"""`replay:RUN_DIR` replays a recorded campaign turn by turn, even where the evaluation measures
other numbers (prompts carry measured speedups): the request hash is a reported check, not a key.

The real-model campaign recorded on the H200 (`llm-runs/refine-h200` of the shared folder) is
replayed on this CPU for one task in both modes, from its `rms_norm` exchanges kept in
tests/fixtures/replay (the whole suite takes too long for the test suite; `docs/lab/replay.md`
gives the full replay's figures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agentloop.cli import app
from agentloop.providers import Message, get_provider, read_exchanges
from agentloop.providers.base import request_meta

RECORDED = Path(__file__).parent / "fixtures" / "replay" / "refine-h200"


def _write_record(run_dir: Path) -> None:
    """A two-turn loop recorded with meta, as a campaign records it."""
    from agentloop.providers import ExchangeRecorder
    from agentloop.providers.base import Completion

    recorder = ExchangeRecorder(run_dir)
    meta = {"cell": "refine/baseline/exchange:x", "task": "rms_norm", "role": "coder"}
    for seed, (ask, answer) in enumerate([("first 1.00x", "one"), ("second 2.00x", "two")], start=1):
        recorder.record("exchange", "x", [Message(role="user", content=f"task: rms_norm\n{ask}")], seed=seed,
                        completion=Completion(text=answer, model="x", provider="exchange"), meta=meta)


def test_a_turn_with_other_numbers_gets_the_recorded_answer_and_is_reported(tmp_path):
    _write_record(tmp_path)
    replay = get_provider(f"replay:{tmp_path}", timeout_s=30)  # the recorded provider's option is ignored
    meta = {"cell": "refine/baseline/replay:elsewhere", "task": "rms_norm", "role": "coder"}
    token = request_meta.set(meta)
    try:
        first = replay.complete([Message(role="user", content="task: rms_norm\nfirst 1.00x")], seed=1)
        second = replay.complete([Message(role="user", content="task: rms_norm\nsecond 0.01x")], seed=2)
        assert (first.text, second.text) == ("one", "two")
        assert replay.matched == 1
        (line,) = replay.divergence_lines()
        assert line.startswith("replay: refine/baseline|rms_norm diverged from the record at its coder "
                               "request 2")
        with pytest.raises(Exception, match="asks its coder for answer 3, but the record holds 2"):
            replay.complete([Message(role="user", content="task: rms_norm\nthird")], seed=3)
    finally:
        request_meta.reset(token)


def test_a_resumed_replay_takes_up_at_the_turn_the_loop_has_reached(tmp_path):
    # A new process (a resumed run) knows nothing taken; the loop says its role had one answer.
    _write_record(tmp_path)
    replay = get_provider(f"replay:{tmp_path}")
    meta = {"cell": "refine/baseline/replay:x", "task": "rms_norm", "role": "coder", "turn": 1}
    token = request_meta.set(meta)
    try:
        answer = replay.complete([Message(role="user", content="task: rms_norm\nsecond 2.00x")], seed=None)
        assert answer.text == "two" and replay.matched == 1 and not replay.divergences
    finally:
        request_meta.reset(token)


@pytest.mark.timeout(900)
def test_the_recorded_h200_campaign_replays_on_the_cpu(tmp_path):
    campaign = yaml.safe_load((RECORDED / "campaign.yaml").read_text())
    campaign.update(tasks=["rms_norm"], device="cpu", workers=2, parallel=2)
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(campaign))
    out = tmp_path / "replayed"
    result = CliRunner().invoke(app, ["run", str(path), "--model", f"replay:{RECORDED}", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 of 2 loops run" in result.output
    # Which cage the candidates ran in is said once, and kept with the run's provenance.
    assert result.output.count("candidates run caged: network ") == 1
    summary = json.loads((out / "summary.json").read_text())
    assert [c["llm_calls"] for c in summary["cells"]] == [2, 2]
    # Every answer is the one recorded for that (mode, task, turn), whatever the prompt said.
    recorded = {}
    for r in read_exchanges(RECORDED):
        if r.meta.get("task") == "rms_norm":
            recorded.setdefault(r.meta["cell"].split("/")[1], []).append(r.text)
    replayed = {}
    for r in read_exchanges(out):
        replayed.setdefault(r.meta["cell"].split("/")[1], []).append(r.text)
    assert replayed == recorded
    # The CPU brief differs from the H200's, so each loop says where it left the record.
    for mode in ("baseline", "bi-aware"):
        assert f"replay: refine/{mode}|rms_norm diverged from the record at its coder request" \
            in result.output
