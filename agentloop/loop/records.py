"""Concluded candidates written to the results store: the candidate row, one gate-result row per
stage it went through, and one timing row per benchmarked shape.

Writing is idempotent per (cell, task, candidate number), so a node that a killed run repeats
on resume does not record its candidates twice.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agentloop.evaluation.stages import BI_STAGES, STAGES, code_hash
from agentloop.loop.state import Candidate

if TYPE_CHECKING:
    from agentloop.loop.context import LoopContext


def _flag(value: bool | None) -> int | None:
    return None if value is None else int(value)


def first_rule(c: Candidate) -> str | None:
    """The first error finding's rule id of the stage that rejected the candidate."""
    outcome = c.stages.get(c.rejected_by or "")
    if outcome is None or outcome.gate is None:
        return None
    return next((f.rule for f in outcome.gate.findings if f.severity == "error"), None)


def correct(c: Candidate) -> bool | None:
    """Correct on the checks and the benchmark's re-check; None when it never got that far."""
    if c.accepted:
        return True
    if c.rejected_by in ("correctness", "benchmark"):
        return False
    return None


def record_candidate(ctx: LoopContext, c: Candidate, parent: int | None) -> int:
    """Write a concluded candidate and its stage results; its row id."""
    store, cell = ctx.store, ctx.cell
    existing = store.query("SELECT id FROM candidates WHERE cell = ? AND task = ? AND iteration = ?",
                           cell.id, ctx.task.name, c.number)
    if existing:
        cid = existing[0]["id"]
        if store.gate_results(cid) or not c.stages:
            return cid
    else:
        bench = c.stages.get("benchmark")
        timed = bench.benchmark if bench else None
        speedup = timed.speedup if timed and timed.speedup > 0 else None
        cid = store.add_candidate(
            cell=cell.id, task=ctx.task.name, style=cell.style, mode=cell.mode, provider=cell.provider,
            iteration=c.number, parent=parent, hash=c.code_hash or code_hash(""), code=c.code,
            status=c.status, rejected_by=c.rejected_by, rule=first_rule(c), correct=_flag(correct(c)),
            bi_static=_flag(c.passed("static")), bi_dynamic=_flag(c.passed("dynamic")), speedup=speedup)
    for stage in (s for s in STAGES if s in c.stages):
        outcome = c.stages[stage]
        enforced = stage not in BI_STAGES or ctx.bi_aware
        gate = outcome.gate
        store.add_gate_result(
            cid, stage, outcome.passed, enforced, outcome.seconds,
            [f.model_dump() for f in gate.findings] if gate else [],
            gate.counterexample.model_dump() if gate and gate.counterexample else None,
            outcome.error)
        if outcome.benchmark is not None:
            for s in outcome.benchmark.shapes:
                store.add_timing(cid, s.dims, s.candidate.median_ms if s.candidate.n else None,
                                 s.reference.median_ms if s.reference.n else None,
                                 s.speedup if s.speedup > 0 else None)
    return cid


def archive_candidate(ctx: LoopContext, c: Candidate) -> None:
    """Add an accepted, benchmarked candidate to the loop's archive, when the run records into one."""
    bench = c.stages["benchmark"].benchmark if "benchmark" in c.stages else None
    if ctx.archive is None or not c.accepted or c.code is None or bench is None or bench.speedup <= 0:
        return
    shapes = [{"dims": s.dims, "candidate_ms": s.candidate.median_ms, "reference_ms": s.reference.median_ms,
               "baselines": {n: t.median_ms for n, t in s.baselines.items()}} for s in bench.shapes]
    ctx.archive.add({
        "task": ctx.task.name, "device": ctx.device, "device_name": bench.device_name, "dtype": bench.dtype,
        "mode": ctx.cell.mode, "style": ctx.cell.style, "provider": ctx.cell.provider,
        "campaign": ctx.campaign_name, "run_dir": str(ctx.run_dir.resolve()), "cell": ctx.cell.id,
        "iteration": c.number, "hash": c.code_hash, "code": c.code, "bi_static": _flag(c.passed("static")),
        "bi_dynamic": _flag(c.passed("dynamic")), "speedup": bench.speedup,
        "production_speedup": bench.production_speedup, "shapes": json.dumps(shapes)})
