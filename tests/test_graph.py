"""The optimisation loop end to end: a real campaign through the worker pool with `replay`, and
fast runs over a fake pool for routing, budgets, feedback and the evaluation cache."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from loop_fakes import REAL_CORPUS, FakePool, ScriptedProvider, loop_context, marks

from agentloop.campaign.file import parse_campaign
from agentloop.campaign.run import checkpointer, run_campaign, run_loop_graph
from agentloop.evaluation.pool import WorkerPool
from agentloop.evaluation.stages import STAGES, code_hash
from agentloop.loop.cell import Budget
from agentloop.loop.graph import build_graph
from agentloop.loop.state import LoopState
from agentloop.results.store import Store

ROWS = (REAL_CORPUS / "rms_norm" / "candidates" / "rows.py").read_text()
SPLIT = (REAL_CORPUS / "rms_norm" / "candidates" / "split_by_batch.py").read_text()


# A real campaign: replay over three real kernels, two styles, both modes, the worker pool ------
@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "run"
    pools: list[WorkerPool] = []

    class CountingPool(WorkerPool):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.calls: Counter = Counter()
            pools.append(self)

        def evaluate_stage(self, code, task, stage, settings):
            self.calls[(code_hash(code), stage)] += 1
            return super().evaluate_stage(code, task, stage, settings)

    campaign = parse_campaign({
        "name": "graph", "tasks": ["rms_norm"], "styles": ["refine", "team"],
        "modes": ["baseline", "bi-aware"],
        "model": "replay", "model_options": {"tasks_dir": str(REAL_CORPUS)}, "budget": {"iterations": 3},
        "device": "cpu", "eval": {"stage_timeout_s": {"compile": 60, "dynamic": 120, "correctness": 120,
                                                      "benchmark": 120}}})
    outcome = run_campaign(campaign, out, pool_factory=CountingPool)
    store = Store(out / "results.sqlite")
    yield out, outcome, store, pools[0]
    store.close()


def _cell_candidates(store, cell):
    return store.candidates(cell=cell, task="rms_norm")


def test_every_loop_writes_its_result_and_final_kernel(real_run):
    out, outcome, store, _ = real_run
    results = {r["cell"]: r for r in store.task_results()}
    assert sorted(results) == ["refine/baseline/replay", "refine/bi-aware/replay", "team/baseline/replay",
                               "team/bi-aware/replay"]
    assert outcome.loops == outcome.ran == 4
    for cell, r in results.items():
        if cell.startswith("refine/"):  # refine proposes the whole corpus, rows.py included
            assert r["correct"] == 1, cell
        if not r["correct"]:
            assert r["final_candidate"] is None and r["bi_pass"] == 0
            continue
        final = store.query("SELECT * FROM candidates WHERE id = ?", r["final_candidate"])[0]
        assert final["status"] == "accepted" and final["speedup"] == pytest.approx(r["speedup"])
        kernel = out / "kernels" / cell.replace("/", "--") / "rms_norm.py"
        assert kernel.read_text() == final["code"]
        # bi_pass is the dynamic gate's verdict on the final kernel, whatever the mode.
        dynamic = [g for g in store.gate_results(final["id"]) if g["gate"] == "dynamic"]
        assert r["bi_pass"] == dynamic[0]["passed"]


def test_bi_aware_rejects_what_baseline_only_records(real_run):
    _, _, store, _ = real_run
    base = {c["hash"]: c for c in _cell_candidates(store, "refine/baseline/replay")}
    aware = {c["hash"]: c for c in _cell_candidates(store, "refine/bi-aware/replay")}
    split, rows = code_hash(SPLIT), code_hash(ROWS)
    # refine proposes the whole three-kernel corpus within a budget of three.
    assert split in base and split in aware and rows in aware
    assert base[split]["status"] == "accepted" and 0 in (base[split]["bi_static"], base[split]["bi_dynamic"])
    assert aware[split]["status"] == "rejected" and aware[split]["rejected_by"] in ("static", "dynamic")
    assert aware[rows]["status"] == "accepted"
    # The guidance in bi-aware prompts steers replay to the kernels without hazards first.
    assert aware[split]["iteration"] == 3
    for cell in ("refine/bi-aware/replay", "team/bi-aware/replay"):
        for c in _cell_candidates(store, cell):
            if c["status"] == "accepted":
                assert c["bi_static"] == 1 and c["bi_dynamic"] == 1
    for cell, enforced in (("refine/baseline/replay", 0), ("refine/bi-aware/replay", 1)):
        for c in _cell_candidates(store, cell):
            for g in store.gate_results(c["id"]):
                assert g["enforced"] == (enforced if g["gate"] in ("static", "dynamic") else 1)


def test_feedback_goes_back_to_generate_and_baseline_hears_nothing_of_bi(real_run):
    out, _, _, _ = real_run
    records = [json.loads(line) for line in (out / "exchanges.jsonl").read_text().splitlines()]
    for r in records:
        text = "\n".join(m["content"] for m in r["messages"])
        if "/baseline/" in r["meta"]["cell"]:
            assert "Batch-invariance guidance" not in text and "Batch invariance violated" not in text
            assert "Static analysis found" not in text
        else:
            assert "Batch-invariance guidance" in text
    aware = [r for r in records if r["meta"]["cell"] == "refine/bi-aware/replay"]
    turns = [m["content"] for m in aware[-1]["messages"] if m["role"] == "user"][1:]
    assert len(turns) == 2 and all(t.startswith("## Feedback on candidate") for t in turns)
    # The wrong kernel's rejection comes back with its findings and their fix hints.
    rejected = [t for t in turns if "Rejected by the correctness stage" in t]
    assert len(rejected) == 1 and "[CR0" in rejected[0] and "fix:" in rejected[0]


def test_every_exchange_and_stage_is_recorded_once(real_run):
    out, outcome, store, pool = real_run
    jsonl = (out / "exchanges.jsonl").read_text().splitlines()
    stored = store.query("SELECT role, cell FROM exchanges")
    assert len(jsonl) == len(stored) == sum(r["llm_calls"] for r in store.task_results())
    assert {r["role"] for r in stored if r["cell"].startswith("team/")} == {"planner", "coder", "reviewer"}
    # The evaluation cache: no kernel's stage ran twice across the four loops.
    assert pool.calls and max(pool.calls.values()) == 1
    assert outcome.cache_hits > 0 and outcome.cache_misses == sum(pool.calls.values())
    for c in store.candidates():
        gates = [g["gate"] for g in store.gate_results(c["id"])]
        assert gates == list(STAGES[:len(gates)])  # the same stages, in order, for every style
        if c["status"] == "accepted":
            assert gates == list(STAGES)
            timings = store.query("SELECT COUNT(*) AS n FROM timings WHERE candidate_id = ?", c["id"])
            assert timings[0]["n"] >= 1


# Fast runs over a fake pool ------------------------------------------------------------------
def _run(ctx, tmp_path) -> LoopState:
    saver = checkpointer(tmp_path / "checkpoints.sqlite")
    try:
        return run_loop_graph(build_graph(saver), ctx)
    finally:
        saver.conn.close()


@pytest.mark.parametrize("mode", ["baseline", "bi-aware"])
def test_routing_by_mode(tmp_path, mode):
    ctx = loop_context(tmp_path, mode=mode, budget=Budget(iterations=4))
    state = _run(ctx, tmp_path)
    by_file = {}
    for c in state.candidates:
        failing, speedup = marks(c.code)
        by_file[(frozenset(failing), speedup)] = c
    assert len(by_file) == 4  # the whole fake corpus
    split = by_file[(frozenset({"static", "dynamic"}), 3.0)]
    atomic = by_file[(frozenset({"dynamic"}), 2.0)]
    wrong = by_file[(frozenset({"correctness"}), 4.0)]
    rows = by_file[(frozenset(), 1.5)]
    assert wrong.rejected_by == "correctness" and rows.accepted
    if mode == "baseline":
        assert split.accepted and atomic.accepted and split.passed("static") is False
        assert state.candidate(state.final) is split and state.bi_pass is False
        assert all("split count" not in c.feedback for c in state.candidates)
    else:
        assert split.rejected_by == "static" and "dynamic" not in split.stages
        assert atomic.rejected_by == "dynamic" and "Batch invariance violated" in atomic.feedback
        assert "split count chosen from T" in split.feedback
        assert "choose the split from H only" in split.feedback
        assert state.candidate(state.final) is rows and state.bi_pass is True
    result = ctx.store.task_results()[0]
    assert result["speedup"] == pytest.approx(state.candidate(state.final).speedup)


@pytest.mark.parametrize("budget, reason", [
    (Budget(iterations=2), "budget: 2 candidates"),
    (Budget(iterations=9, llm_calls=2), "budget: 2 LLM calls"),
    (Budget(iterations=9, tokens=250), "budget: 250 tokens"),
    (Budget(iterations=9, wall_s=1e-6), "budget: 1e-06 s"),
    (Budget(iterations=9, target_speedup=1.2), "target speedup 1.2x reached"),
])
def test_budget_ends_the_loop(tmp_path, budget, reason):
    rows = (REAL_CORPUS / "rms_norm" / "candidates" / "rows.py").read_text()
    code = "# fake: speedup=1.5\n" + rows
    llm = ScriptedProvider(lambda m: f"Here.\n```python\n{code}```\n", tokens=(100, 50))
    state = _run(loop_context(tmp_path, budget=budget, providers={"coder": llm}), tmp_path)
    assert state.stop_reason == reason
    expected = {"budget: 2 candidates": 2, "budget: 2 LLM calls": 2, "budget: 250 tokens": 2}.get(reason, 1)
    assert len(state.candidates) == expected == len(llm.requests) == state.usage.llm_calls
    assert state.usage.tokens == 150 * expected


def test_an_answer_without_code_becomes_feedback(tmp_path):
    good = (REAL_CORPUS / "rms_norm" / "candidates" / "rows.py").read_text()
    answers = iter(["I would fuse the reduction with the scaling.", f"```python\n{good}```"])
    llm = ScriptedProvider(lambda m: next(answers))
    state = _run(loop_context(tmp_path, budget=Budget(iterations=2), providers={"coder": llm}), tmp_path)
    first, second = state.candidates
    assert first.code is None and first.rejected_by == "extract" and not first.stages
    assert "held no code" in llm.requests[1][-1].content
    assert second.accepted
    row = Store(tmp_path / "results.sqlite").candidates()[0]
    assert row["rejected_by"] == "extract" and row["code"] is None


def test_cache_answers_repeats_within_and_across_runs(tmp_path):
    pool = FakePool()
    store = Store(tmp_path / "results.sqlite")
    # Budget 6 over a corpus of 4: replay proposes some kernels twice.
    for mode in ("baseline", "bi-aware"):
        ctx = loop_context(tmp_path / mode, mode=mode, budget=Budget(iterations=6), pool=pool, store=store)
        state = _run(ctx, tmp_path / mode)
        assert len(state.candidates) == 6
    assert max(pool.calls.values()) == 1
    distinct = {h for h, _ in pool.calls}
    assert len(distinct) == 4
    # A later run over the same store (a resumed campaign) evaluates nothing already known.
    again = FakePool()
    ctx = loop_context(tmp_path / "again", mode="baseline", budget=Budget(iterations=4), pool=again,
                       store=store)
    _run(ctx, tmp_path / "again")
    assert not again.calls
