"""Repeatable offline runs. A campaign on `replay` proposes the same candidates and keeps the same
final kernels however its timings come out; `replay:RUN_DIR` replays a recorded campaign turn by
turn, its candidates in order, even where the evaluation measures other numbers (prompts carry
measured speedups): the request hash is not a key, and the loop is said to leave the record only
where a request states other verdicts on earlier candidates than the recorded one did.

The real-model campaign recorded on the H200 (`llm-runs/refine-h200` of the shared folder) is
replayed on this CPU for one task in both modes, from its `rms_norm` exchanges kept in
tests/fixtures/replay (the whole suite takes too long for the test suite; `docs/lab/replay.md`
gives the full replay's figures)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from agentloop.cli import app
from agentloop.providers import Message, get_provider, read_exchanges
from agentloop.providers.base import request_meta
from agentloop.providers.extract import extract_code
from agentloop.results.store import Store

RECORDED = Path(__file__).parent / "fixtures" / "replay" / "refine-h200"


_ACCEPTED = "## Feedback on candidate 1\nAccepted: correct on every checked shape and dtype."


def _write_record(run_dir: Path) -> None:
    """A two-turn loop recorded with meta, as a campaign records it: the second request states
    that candidate 1 was accepted."""
    from agentloop.providers import ExchangeRecorder
    from agentloop.providers.base import Completion

    recorder = ExchangeRecorder(run_dir)
    meta = {"cell": "refine/baseline/exchange:x", "task": "rms_norm", "role": "coder"}
    turns = [("first 1.00x", "one"), (f"{_ACCEPTED}\nsecond 2.00x", "two")]
    for seed, (ask, answer) in enumerate(turns, start=1):
        recorder.record("exchange", "x", [Message(role="user", content=f"task: rms_norm\n{ask}")], seed=seed,
                        completion=Completion(text=answer, model="x", provider="exchange"), meta=meta)


def test_a_turn_with_other_numbers_gets_the_recorded_answer_and_other_verdicts_are_reported(tmp_path):
    _write_record(tmp_path)
    replay = get_provider(f"replay:{tmp_path}", timeout_s=30)  # the recorded provider's option is ignored
    meta = {"cell": "refine/baseline/replay:elsewhere", "task": "rms_norm", "role": "coder"}
    token = request_meta.set(meta)
    try:
        first = replay.complete([Message(role="user", content="task: rms_norm\nfirst 1.00x")], seed=1)
        # Other numbers, the same verdict: the recorded answer, and no divergence.
        second = replay.complete([Message(role="user", content=f"task: rms_norm\n{_ACCEPTED}\nsecond 0.01x")],
                                 seed=2)
        assert (first.text, second.text) == ("one", "two")
        assert (replay.matched, replay.agreed) == (1, 2) and not replay.divergence_lines()
        with pytest.raises(Exception, match="asks its coder for answer 3, but the record holds 2"):
            replay.complete([Message(role="user", content="task: rms_norm\nthird")], seed=3)
    finally:
        request_meta.reset(token)
    # Where the request states another verdict, the loop has left the record: said once, where.
    replay = get_provider(f"replay:{tmp_path}")
    token = request_meta.set(meta)
    try:
        replay.complete([Message(role="user", content="task: rms_norm\nfirst 1.00x")], seed=1)
        rejected = "## Feedback on candidate 1\nRejected by the dynamic stage.\nrow 3 differs"
        answer = replay.complete([Message(role="user", content=f"task: rms_norm\n{rejected}")], seed=2)
        assert answer.text == "two"
        (line,) = replay.divergence_lines()
        assert line.startswith("replay: refine/baseline|rms_norm diverged from the record at its coder "
                               "request 2: it states candidate 1 rejected by dynamic, the record candidate 1 "
                               "accepted")
    finally:
        request_meta.reset(token)


def test_a_resumed_replay_takes_up_at_the_turn_the_loop_has_reached(tmp_path):
    # A new process (a resumed run) knows nothing taken; the loop says its role had one answer.
    _write_record(tmp_path)
    replay = get_provider(f"replay:{tmp_path}")
    meta = {"cell": "refine/baseline/replay:x", "task": "rms_norm", "role": "coder", "turn": 1}
    token = request_meta.set(meta)
    try:
        answer = replay.complete([Message(role="user", content=f"task: rms_norm\n{_ACCEPTED}\nsecond 2.00x")],
                                 seed=None)
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
    # The candidates are the recorded kernels, in order, in both modes.
    store = Store(out / "results.sqlite")
    try:
        for mode in ("baseline", "bi-aware"):
            rows = store.query("SELECT code, status FROM candidates WHERE cell LIKE ? ORDER BY iteration",
                               f"refine/{mode}/%")
            assert [r["code"] for r in rows] == [extract_code(t, "rms_norm") for t in recorded[mode]]
            # The CPU's prompts differ from the H200's (its brief, every measured number), yet the
            # kernel the H200 accepted is accepted here too: the second request states the
            # recorded verdict, and no loop is said to have left the record.
            assert rows[0]["status"] == "accepted"
    finally:
        store.close()
    asked = [r for r in read_exchanges(out) if len(r.messages) > 2]
    recorded_hashes = {r.request_hash for r in read_exchanges(RECORDED)}
    assert asked and all(r.request_hash not in recorded_hashes for r in asked)
    assert "diverged from the record" not in result.output


# Repeatable runs: the same candidates and final kernels whatever the timings -----------------
# The fake corpus (tests/fixtures/loop/fake: its `# fake:` lines say which stages each source
# fails and its speedup) and three kernels within 0.2 % of `rows.py`'s 1.5x: which of them is
# fastest is left to timing noise.
_NEAR_BODIES = [
    ("rsqrt", 1.502, "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight"),
    ("float", 1.501, "y = x.float()\n    return (y * torch.rsqrt((y * y).mean(-1, keepdim=True) + eps))"
                    ".to(x.dtype) * weight"),
    ("norm", 1.498, "return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * weight")]
_NEAR = {f"rows_{name}.py": f"# fake: speedup={speedup}\nimport torch\n\n\ndef rms_norm(x, weight, eps):\n"
                            f"    {body}\n" for name, speedup, body in _NEAR_BODIES}


def _noisy_pool(noise_seed: int):
    """A pool factory: the fake pool's verdicts, its benchmark's times each off by up to 0.5 %
    (as a re-run measures them), drawn from a generator of its own per run."""
    import random

    from loop_fakes import FakePool

    class NoisyPool(FakePool):
        def __init__(self, device: str = "cpu", workers: int | None = None) -> None:
            super().__init__(device, workers)
            self.rng = random.Random(noise_seed)

        def evaluate_stage(self, code, task, stage, settings):
            outcome = super().evaluate_stage(code, task, stage, settings)
            if stage != "benchmark" or not outcome.passed:
                return outcome
            bench = outcome.benchmark
            with self._lock:
                noise = [self.rng.uniform(0.995, 1.005) for _ in bench.shapes]
            shapes = [s.model_copy(update={
                "speedup": s.speedup * f,
                "candidate": s.candidate.model_copy(update={"median_ms": s.candidate.median_ms / f})})
                for s, f in zip(bench.shapes, noise, strict=True)]
            speedup = bench.speedup * noise[0]
            return outcome.model_copy(update={"benchmark": bench.model_copy(
                update={"shapes": shapes, "speedup": speedup})})

    return NoisyPool


def _campaign(model: str, corpus: Path):
    from agentloop.campaign.file import parse_campaign

    return parse_campaign({"name": "repeat", "tasks": ["rms_norm"], "styles": ["refine", "evolve"],
                           "modes": ["baseline", "bi-aware"], "model": model,
                           "model_options": {"tasks_dir": str(corpus)} if model == "replay" else {},
                           "budget": {"iterations": 6}, "device": "cpu", "seed": 3})


def _loop(cell: str) -> str:
    """"style/mode" of a cell id ("style/mode/provider", the provider a path maybe)."""
    return "/".join(cell.split("/")[:2])


def _course(out: Path) -> tuple[dict, dict, list[str], list[float]]:
    """Per loop (style/mode) its candidates' code hashes in order and its final kernel's hash;
    the request hashes; the speedups measured."""
    store = Store(out / "results.sqlite")
    try:
        loops: dict[str, list[str]] = {}
        for c in store.query("SELECT cell, hash FROM candidates ORDER BY cell, task, iteration"):
            loops.setdefault(_loop(c["cell"]), []).append(c["hash"])
        hashes = {c["id"]: c["hash"] for c in store.candidates()}
        finals = {_loop(r["cell"]): hashes.get(r["final_candidate"]) for r in store.task_results()}
        asked = [r["request_hash"] for r in store.query("SELECT request_hash FROM exchanges ORDER BY id")]
        speedups = [r["speedup"] for r in store.query("SELECT speedup FROM candidates WHERE speedup > 0")]
    finally:
        store.close()
    return loops, finals, asked, speedups


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    """Two runs of one campaign on `replay` whose timings differ, the first recorded."""
    import shutil

    from loop_fakes import FAKE_CORPUS

    from agentloop.campaign.run import run_campaign

    root = tmp_path_factory.mktemp("repeat")
    corpus = root / "tasks"
    shutil.copytree(FAKE_CORPUS, corpus)
    for name, source in _NEAR.items():
        (corpus / "rms_norm" / "candidates" / name).write_text(source)
    runs = []
    for noise_seed in (1, 2):
        out = root / f"run{noise_seed}"
        run_campaign(_campaign("replay", corpus), out, pool_factory=_noisy_pool(noise_seed))
        runs.append(out)
    return root, runs


def test_a_campaign_on_replay_repeats_its_candidates_and_final_kernels_whatever_the_timings(repeated):
    _, (one, two) = repeated
    loops, finals, asked, speedups = _course(one)
    again, finals_again, asked_again, speedups_again = _course(two)
    assert sorted(loops) == ["evolve/baseline", "evolve/bi-aware", "refine/baseline", "refine/bi-aware"]
    assert all(len(hashes) == 6 for hashes in loops.values())
    # The runs measured other times, and their prompts said so ...
    assert speedups != speedups_again and len(asked) == len(asked_again) and set(asked) != set(asked_again)
    # ... yet each loop proposed the same kernels in the same order and kept the same final one.
    assert again == loops
    assert finals_again == finals and all(finals.values())
    # In bi-aware mode the final kernel is one of the four near 1.5x: the first of them proposed.
    store = Store(one / "results.sqlite")
    try:
        for cell in ("refine/bi-aware/replay", "evolve/bi-aware/replay"):
            rows = store.query("SELECT hash, speedup FROM candidates WHERE cell = ? AND status = 'accepted' "
                               "ORDER BY iteration", cell)
            assert len(rows) >= 2 and max(r["speedup"] for r in rows) < 1.6
            assert finals[_loop(cell)] == rows[0]["hash"]
    finally:
        store.close()


def test_a_replayed_campaign_proposes_the_recorded_candidates_in_order(repeated):
    from agentloop.campaign.run import run_campaign

    root, (one, _) = repeated
    loops, finals, asked, _ = _course(one)
    out = root / "replayed"
    outcome = run_campaign(_campaign(f"replay:{one}", root / "tasks"), out, pool_factory=_noisy_pool(3))
    replayed, replayed_finals, replayed_asked, _ = _course(out)
    assert replayed == loops and replayed_finals == finals
    # Its prompts carry other times than the record's, yet no loop is said to leave the record:
    # every request states the verdicts the recorded one did.
    assert set(replayed_asked) != set(asked)
    assert outcome.notes == []


def _every_recorded_request(record: Path, change) -> tuple[Any, list[tuple[str, str]]]:
    """Each request of a record asked again as a campaign's loop asks it (its cell, task, role and
    turn), its text changed by `change`: the replay provider and (answer, recorded answer) pairs."""
    replay = get_provider(f"replay:{record}")
    turns: dict[tuple, int] = {}
    pairs = []
    for r in read_exchanges(record):
        style, mode, _ = r.meta["cell"].split("/", 2)
        key = (style, mode, r.meta["task"], r.meta["role"])
        meta = {"cell": f"{style}/{mode}/replay:{record}", "task": r.meta["task"], "role": r.meta["role"],
                "turn": turns.get(key, 0)}
        turns[key] = turns.get(key, 0) + 1
        messages = [m.model_copy(update={"content": change(m.content)}) for m in r.messages]
        token = request_meta.set(meta)
        try:
            pairs.append((replay.complete(messages, seed=r.seed).text, r.text))
        finally:
            request_meta.reset(token)
    return replay, pairs


_SHARED_RECORD = Path(__file__).resolve().parents[2] / "shared" / "llm-runs" / "refine-h200"


@pytest.mark.parametrize("record", [
    RECORDED, pytest.param(_SHARED_RECORD, marks=pytest.mark.skipif(
        not (_SHARED_RECORD / "exchanges.jsonl").is_file(), reason="no shared folder"))],
    ids=["rms_norm", "whole-suite"])
def test_the_recorded_h200_requests_with_other_timings_get_their_answers_and_no_divergence(record):
    # Every measured number (speedups, times) 7 % off, as another machine measures them.
    def other_timings(text: str) -> str:
        return re.sub(r"\b\d+\.\d+(?=x| us)", lambda m: f"{float(m.group()) * 1.07:.3g}", text)

    assert other_timings("Speedup over the reference: 7.78x") != "Speedup over the reference: 7.78x"
    replay, pairs = _every_recorded_request(record, other_timings)
    assert all(answer == recorded for answer, recorded in pairs) and len(pairs) >= 4
    assert replay.matched < len(pairs) and replay.agreed == len(pairs) and not replay.divergence_lines()
    # A kernel the record accepted and this run rejected: each loop's second request says so.
    replay, pairs = _every_recorded_request(record, lambda text: text.replace(
        "Accepted: correct on every checked shape and dtype", "Rejected by the correctness stage.\nWrong"))
    assert all(answer == recorded for answer, recorded in pairs)
    lines = replay.divergence_lines()
    assert len(lines) == len({(r.meta["cell"], r.meta["task"]) for r in read_exchanges(record)
                              if "Accepted: correct" in r.messages[-1].content})
    assert all("at its coder request 2: it states candidate 1 rejected by correctness, the record "
               "candidate 1 accepted" in line for line in lines)
