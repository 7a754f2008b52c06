"""The nodes of the optimisation loop. Each takes the state and the loop's context and returns
the fields it changes.

`generate` asks the style for this round's candidates; each stage node runs its stage on every
candidate still pending, in parallel through the worker pool (behind the evaluation cache). A
candidate that a stage rejects leaves the round with feedback; in baseline mode the BI stages
(static, dynamic) record their outcome and reject nothing. `finish` picks the final kernel,
audits its batch invariance and writes the loop's result. Measured speedups choose nothing but
through `LoopState.best` and its tolerance, so timing noise does not change a run's course (a
campaign's `budget.wall_s` stops a loop by the clock, as asked).
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.runtime import Runtime

from agentloop.evaluation.benchmark import BenchmarkResult
from agentloop.evaluation.stages import BI_STAGES, STAGES, Stage, code_hash
from agentloop.loop.context import LoopContext
from agentloop.loop.records import archive_candidate, record_candidate
from agentloop.loop.state import Candidate, LoopState, fastest
from agentloop.loop.styles import Proposing
from agentloop.providers.extract import extract_code
from agentloop.results.store import kernel_file
from gates.feedback import render_gate


def stop_reason(state: LoopState, ctx: LoopContext) -> str | None:
    """Why the loop ends now, or None while it may go on."""
    b = ctx.budget
    if state.stop_reason:
        return state.stop_reason
    if state.proposed >= b.iterations:
        return f"budget: {b.iterations} candidates"
    if b.llm_calls is not None and state.usage.llm_calls >= b.llm_calls:
        return f"budget: {b.llm_calls} LLM calls"
    if b.tokens is not None and state.usage.tokens >= b.tokens:
        return f"budget: {b.tokens} tokens"
    if b.wall_s is not None and state.wall_s >= b.wall_s:
        return f"budget: {b.wall_s:g} s"
    best = state.best(ctx.bi_aware)
    if b.target_speedup is not None and best is not None and (best.speedup or 0) >= b.target_speedup:
        return f"target speedup {b.target_speedup:g}x reached"
    return None


# Feedback ----------------------------------------------------------------------------------
def feedback(c: Candidate, state: LoopState, ctx: LoopContext) -> str:
    """What the agent is told about a concluded candidate (prompts/feedback.<mode>.j2; gate
    results rendered by gates.feedback, the one place that renders them)."""
    variables: dict[str, Any] = {"number": c.number, "status": c.status, "stage": c.rejected_by,
                                 "details": "", "error": None, "speedup": c.speedup, "shapes": [],
                                 "best": None, "warnings": "", "production": None}
    if c.status == "rejected" and c.rejected_by != "extract":
        outcome = c.stages[c.rejected_by]
        variables["error"] = outcome.error
        if outcome.gate is not None:
            variables["details"] = render_gate(outcome.gate, ctx.task, ctx.device)
    elif c.accepted:
        bench = c.stages["benchmark"].benchmark
        variables["shapes"] = [{"dims": s.dims, "speedup": s.speedup} for s in bench.shapes]
        # The best so far with this one counted, by the final kernel's rule (`fastest`).
        best = fastest([*state.eligible(ctx.bi_aware), c], state.tolerance) or c
        variables["best"] = {"number": best.number, "speedup": best.speedup}
        variables["production"] = production_feedback(bench)
        static = c.stages.get("static")
        if ctx.bi_aware and static is not None and static.gate is not None and static.gate.findings:
            variables["warnings"] = render_gate(static.gate, ctx.task, ctx.device)
    return ctx.prompts.turn("feedback", ctx.cell.mode, **variables).content


def production_feedback(bench: BenchmarkResult) -> dict[str, Any] | None:
    """Where an accepted kernel stands against the task's production baselines (the fastest at
    each shape), for the feedback template; None when none was timed."""
    if bench.production_speedup is None:
        return None
    shapes = [{"dims": s.dims, "baseline": s.fastest_baseline, "speedup": s.production_speedup,
               "baseline_us": s.baselines[s.fastest_baseline].median_ms * 1e3,
               "candidate_us": s.candidate.median_ms * 1e3}
              for s in bench.shapes if s.fastest_baseline is not None and s.production_speedup is not None]
    return {"speedup": bench.production_speedup, "shapes": shapes}


def conclude(c: Candidate, status: str, rejected_by: str | None, state: LoopState,
             ctx: LoopContext) -> Candidate:
    """The candidate accepted or rejected: its feedback rendered, and recorded in the store."""
    c = c.model_copy(update={"status": status, "rejected_by": rejected_by})
    c.feedback = feedback(c, state, ctx)
    parent = state.candidate(c.parent).store_id if c.parent else None
    c.store_id = record_candidate(ctx, c, parent)
    if c.seeded:
        archive_file, archive_id = c.origin.rsplit("#", 1)
        ctx.store.add_seeded(c.store_id, archive_file, int(archive_id), c.notes.get("archived_speedup") and
                             float(c.notes["archived_speedup"]))
    archive_candidate(ctx, c)
    if ctx.on_candidate is not None:
        ctx.on_candidate(ctx, state, c)
    return c


# Nodes -------------------------------------------------------------------------------------
def seed_round(state: LoopState, ctx: LoopContext) -> dict[str, Any]:
    """The loop's first round when it starts from archived kernels: they are its first
    candidates, slowest first so that the best is the latest (refine continues from it), and go
    through every stage like any other; no LLM is asked."""
    candidates = []
    for i, k in enumerate(reversed(ctx.seeds)):
        answer = f"```python\n{k.code.rstrip()}\n```\n"
        candidates.append(Candidate(number=i + 1, round=1, seed=0, answer=answer, code=k.code,
                                    code_hash=code_hash(k.code), origin=f"{k.archive}#{k.id}",
                                    notes={"archived_speedup": f"{k.speedup:.6g}",
                                           "archived_from": k.run_dir}))
    return {"candidates": candidates, "round": 1, "pending": [c.number for c in candidates]}


def generate(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    """Ask the style for this round's candidates and extract their code (the first round of a
    loop seeded from the kernel archive takes the archived kernels instead)."""
    ctx = runtime.context
    ctx.check()
    if not state.candidates and ctx.seeds:
        ctx.report_stage("seeding from the kernel archive")
        return seed_round(state, ctx)
    ctx.report_stage("asking the LLM")
    start = time.perf_counter()
    first = len(state.candidates) + 1
    count = max(0, min(ctx.style.per_round, ctx.budget.iterations - state.proposed))
    llm = ctx.llm(state)
    proposals = ctx.style.propose(Proposing(
        state=state, task=ctx.task, mode=ctx.cell.mode, prompts=ctx.prompts, brief=ctx.brief, llm=llm,
        seeds=[ctx.seed_for(first + i) for i in range(count)], context=ctx))
    candidates = list(state.candidates)
    for i, p in enumerate(proposals):
        code = extract_code(p.answer, ctx.task.entry)
        c = Candidate(number=first + i, round=state.round + 1, seed=p.seed, parent=p.parent,
                      inspirations=p.inspirations, answer=p.answer, code=code,
                      code_hash=code_hash(code) if code is not None else None, notes=p.notes)
        if code is None:
            c = conclude(c, "rejected", "extract", state.model_copy(update={"candidates": candidates}), ctx)
        candidates.append(c)
    update: dict[str, Any] = {
        "candidates": candidates, "round": state.round + 1, "usage": state.usage + llm.usage,
        "answered": llm.answered, "wall_s": state.wall_s + time.perf_counter() - start,
        "pending": [c.number for c in candidates[first - 1:] if c.status == "pending"]}
    if not proposals:
        update["stop_reason"] = getattr(ctx.style, "ended", None) or \
            "the style proposed no candidate (LLM-call budget spent)"
    return update


def run_stage(stage: Stage, state: LoopState, ctx: LoopContext) -> dict[str, Any]:
    """One stage on every pending candidate, in parallel; rejections leave the round."""
    ctx.check()
    ctx.report_stage(stage)
    start = time.perf_counter()
    pending = [state.candidate(n) for n in state.pending]
    outcomes = list(ctx.executor.map(lambda c: ctx.evaluator.stage(c.code, ctx.task, stage), pending))
    candidates = list(state.candidates)
    survivors: list[int] = []
    enforced = stage not in BI_STAGES or ctx.bi_aware
    for c, outcome in zip(pending, outcomes, strict=True):
        c = c.model_copy(update={"stages": {**c.stages, stage: outcome}})
        # Later conclusions in this round see earlier ones (the best so far, for feedback).
        now = state.model_copy(update={"candidates": candidates})
        if not outcome.passed and enforced:
            c = conclude(c, "rejected", stage, now, ctx)
        elif stage == STAGES[-1]:
            c = conclude(c, "accepted", None, now, ctx)
        else:
            survivors.append(c.number)
        candidates[c.number - 1] = c
    return {"candidates": candidates, "pending": survivors,
            "wall_s": state.wall_s + time.perf_counter() - start}


def compile_stage(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    """Load each candidate in a worker and call it once (syntax, entry function, Triton compile)."""
    return run_stage("compile", state, runtime.context)


def static_gate(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    """The static BI gate (reads the source only)."""
    return run_stage("static", state, runtime.context)


def dynamic_gate(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    """The dynamic BI gate: rows compared bitwise across batch contexts."""
    return run_stage("dynamic", state, runtime.context)


def correctness(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    """Closeness to the reference on the task's shapes, and the anti-cheat checks."""
    return run_stage("correctness", state, runtime.context)


def benchmark(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    """Timing against the reference; survivors are accepted."""
    return run_stage("benchmark", state, runtime.context)


def finish(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    """Pick the final kernel, audit its batch invariance with the dynamic gate whatever the mode,
    save it, and write the loop's result. The final kernel is the earliest eligible candidate
    whose speedup is within `SPEEDUP_TOLERANCE` (3 %) of the fastest one's (`LoopState.best`):
    timing noise between runs does not change it."""
    ctx = runtime.context
    ctx.report_stage("final audit")
    start = time.perf_counter()
    final = state.best(ctx.bi_aware)
    bi_pass = False
    if final is not None:
        # Both modes are scored alike: the dynamic gate on the final kernel, enforced or not
        # during the loop (the cache answers when the loop already ran it).
        bi_pass = ctx.evaluator.stage(final.code, ctx.task, "dynamic").passed
        path = ctx.run_dir / kernel_file(ctx.cell.id, ctx.task.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(final.code)
    wall_s = state.wall_s + time.perf_counter() - start
    ctx.store.finish_task(
        cell=ctx.cell.id, task=ctx.task.name, style=ctx.cell.style, mode=ctx.cell.mode,
        provider=ctx.cell.provider, final_candidate=final.store_id if final else None,
        correct=int(final is not None), bi_pass=int(bi_pass), speedup=final.speedup if final else None,
        llm_calls=state.usage.llm_calls, input_tokens=state.usage.input_tokens,
        output_tokens=state.usage.output_tokens, wall_s=wall_s)
    return {"final": final.number if final else None, "bi_pass": bi_pass, "wall_s": wall_s,
            "stop_reason": stop_reason(state, ctx)}
