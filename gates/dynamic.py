"""The dynamic batch-invariance gate: every batched output row must be bitwise identical in
every batch context (batch size, position, co-batched content, padded length, permutation,
repeated call) to the same row computed alone.

Rows are compared as raw bits, so NaN, integer and float8 outputs compare correctly. Every run
first checks a deliberately batch-variant copy of the reference through the same contexts and
comparisons (the positive control), so a broken harness cannot pass a candidate silently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel

from gates.batching import RowPools, as_bits
from gates.candidate import describe_exception
from gates.contract import Task
from gates.judge.client import RemoteEntry
from gates.judge.runner_pool import run_gate
from gates.plan import (
    CPU_SINGLES,
    NEAR_TIE,
    SINGLES,
    Context,
    HarnessError,
    add_beyond,
    batch_sizes,
    beyond_sizes,
    content_sizes,
    gate_dtypes,
    is_ragged,
    plan_contexts,
    plan_elements,
)
from gates.reference import as_outputs, reference_fn
from gates.verdict import Counterexample, GateResult


@dataclass
class Outcome:
    """How one pass over the contexts ended: a counterexample, an error, or neither."""

    counterexample: Counterexample | None = None
    error: str | None = None
    calls: int = 0


def dynamic_gate(fn: Callable, task: Task, device: str, *, sizes: list[int] | None = None,
                 dtypes: list[str] | None = None, seed: int = 0, sweep_seed: int | None = None) -> GateResult:
    """Run the dynamic BI gate on an entry function already loaded in this process.

    `sweep_seed` draws the batch sizes beyond the sweep (`gates.plan.beyond_sizes`; default:
    `seed`, so a run is repeatable; an audit passes a fresh one); given `sizes`, none are drawn."""
    start = time.perf_counter()
    beyond = [] if sizes else beyond_sizes(task, device, seed if sweep_seed is None else sweep_seed)
    sizes = sizes or batch_sizes(task, device)
    result = lambda **kw: GateResult(gate="dynamic", seconds=time.perf_counter() - start, **kw)
    for k, dtype in enumerate(dtypes or gate_dtypes(task, device)):
        plan = gate_plan(task, device, sizes, first_dtype=k == 0, seed=seed)
        if k == 0 and beyond:
            plan = add_beyond(plan, beyond, max(sizes), seed if sweep_seed is None else sweep_seed)
        try:
            pools = RowPools.cached(task, device, dtype, plan, seed)
        except Exception as exc:  # noqa: BLE001 - the task's own input generator failed
            return result(passed=False, error=f"cannot generate {dtype} inputs: {describe_exception(exc)}")
        control = run_contexts(batch_variant_copy(task), task, plan, pools, dtype)
        if control.counterexample is None:
            why = control.error or "no difference found"
            return result(passed=False, error=f"positive control failed ({why}): the harness did not "
                                              "catch a deliberately batch-variant copy of the reference, "
                                              "so its verdict cannot be trusted")
        outcome = run_contexts(fn, task, plan, pools, dtype)
        if outcome.error:
            return result(passed=False, error=outcome.error)
        if outcome.counterexample:
            return result(passed=False, counterexample=outcome.counterexample)
    return result(passed=True)


def gate_plan(task: Task, device: str, sizes: list[int], *, first_dtype: bool = True,
              seed: int = 0) -> list[Context]:
    """The contexts for one dtype.

    CPU: the interpreter runs programs one at a time, so one repeat of the row alone shows kept
    state, and small batches show content and position effects at a fraction of the cost;
    CPU_SINGLES random rows alone.
    GPU, first dtype (float32): every batch size, zeros / large (/ long) content at one middle
    size, the largest batch permuted and repeated (atomics make runs differ only sometimes),
    and the first SINGLES random rows alone, each compared with itself in every random batch.
    GPU, later dtypes: each probe alone and batches at every fourth size and the largest, so
    that dtype-dependent launch choices still show at a quarter of the calls."""
    ragged = is_ragged(task, device)
    if device == "cpu":
        return plan_contexts(sizes, ragged=ragged, compact=True, singles=CPU_SINGLES,
                             permute_size=content_sizes(sizes, compact=True)[-1], seed=seed)
    if first_dtype:
        return plan_contexts(sizes, ragged=ragged, contents=1, repeats=1, singles=SINGLES, seed=seed)
    batched = [b for b in sizes if b > 1]
    spaced = sorted({1, *batched[::4], *batched[-1:]})
    return plan_contexts(spaced, ragged=ragged, contents=0, permute=False, extras=False, seed=seed)


class PlanSize(BaseModel):
    """What one dynamic-gate run asks of the device, summed over its dtypes (the positive
    control makes as many calls again, on the same inputs)."""

    calls: int
    """Candidate calls, one per context."""
    rows: int
    """Batch rows passed in all those calls."""
    generated: int
    """Elements of generated inputs (row pools and padding garbage)."""


def plan_size(task: Task, device: str, seed: int = 0) -> PlanSize:
    """The size of the dynamic gate's plan for this task and device, computed without running
    or generating anything (so a GPU plan can be sized on a CPU); beyond-the-sweep batches
    included (their sizes vary with the sweep seed, the count does not)."""
    sizes = batch_sizes(task, device)
    calls = rows = generated = 0
    for k, _ in enumerate(gate_dtypes(task, device)):
        plan = gate_plan(task, device, sizes, first_dtype=k == 0, seed=seed)
        if k == 0:
            plan = add_beyond(plan, beyond_sizes(task, device, seed), max(sizes), seed)
        calls += len(plan)
        rows += sum(c.batch_size for c in plan)
        generated += plan_elements(task, device, plan)
    return PlanSize(calls=calls, rows=rows, generated=generated)


def dynamic_job(code: str, task: Task, device: str, seed: int = 0,
                sweep_seed: int | None = None) -> GateResult:
    """The dynamic gate as a sandbox job: the candidate runs in a caged runner
    (`gates.judge.client`), the gate here."""
    return run_gate("dynamic", code, task, device,
                    lambda runner, _: dynamic_gate(RemoteEntry(runner), task, device, seed=seed,
                                                   sweep_seed=sweep_seed))


def batch_variant_copy(task: Task) -> Callable:
    """The reference with one bit flipped in every row of every batched output whenever the
    batch holds more than one row: what the gate must always catch."""
    ref = reference_fn(task)

    def control(*args: Any) -> tuple:
        outs = list(as_outputs(ref(*args)))
        for i, spec in enumerate(task.outputs):
            out = outs[i]
            if spec.batched and out.shape[0] > 1:
                out = out.clone(memory_format=torch.contiguous_format)  # as_bits must be a view of it
                as_bits(out).view(out.shape[0], -1)[:, 0] ^= 1
                outs[i] = out
        return tuple(outs)

    return control


def _shape_problem(task: Task, outs: tuple, batch_size: int, device: str) -> str | None:
    if len(outs) != len(task.outputs):
        names = ", ".join(o.name for o in task.outputs)
        return f"returned {len(outs)} output(s), expected {len(task.outputs)} ({names})"
    for spec, out in zip(task.outputs, outs, strict=True):
        if not isinstance(out, torch.Tensor):
            return f"output {spec.name} is a {type(out).__name__}, expected a tensor"
        if spec.batched and (out.dim() == 0 or out.shape[0] != batch_size):
            return f"output {spec.name} has shape {tuple(out.shape)} for a batch of {batch_size}"
        if out.device.type != torch.device(device).type:
            return f"output {spec.name} is on {out.device.type}, expected {device}"
    return None


def _difference(want: torch.Tensor, got: torch.Tensor) -> tuple[int, float | None]:
    """Mismatched elements and the largest finite absolute difference between two rows."""
    if want.shape != got.shape:
        return max(want.numel(), got.numel()), None
    differ = as_bits(want) != as_bits(got)
    count = int(differ.sum())
    if want.dtype == torch.bool:
        return count, float(count > 0)
    w, g = want.reshape(-1)[differ].double(), got.reshape(-1)[differ].double()
    finite = torch.isfinite(w) & torch.isfinite(g)
    return count, (float((w - g)[finite].abs().max()) if bool(finite.any()) else None)


def _dims_text(pools: RowPools, extent: int | None) -> str:
    dims = {k: v for k, v in pools.dims.items() if k != pools.task.batch_axis}
    if extent is not None and pools.task.ragged:
        dims[next(iter(pools.task.ragged))] = extent
    return " ".join(f"{k}={v}" for k, v in dims.items())


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> tuple[int, int, float | None] | None:
    """None when two stacks of rows are bitwise equal, else (row index, mismatched elements,
    max abs diff) of the first differing row."""
    if got.shape == want.shape and torch.equal(as_bits(got), as_bits(want)):
        return None
    if got.shape != want.shape:
        return (0, *_difference(want[0], got[0]))
    n = got.shape[0]
    rows = (as_bits(want).view(n, -1) != as_bits(got).view(n, -1)).any(1)
    j = int(rows.nonzero()[0, 0])
    return (j, *_difference(want[j], got[j]))


def run_contexts(fn: Callable, task: Task, plan: list[Context], pools: RowPools, dtype: str) -> Outcome:
    """Call `fn` in every context of the plan until the first row whose bits differ: probe rows
    against the probe alone, random rows that have a "single" context against that row alone,
    every row of a permuted or repeated batch against its base, and the co-batched rows two
    consecutive random batches share against each other."""
    batched = [i for i, o in enumerate(task.outputs) if o.batched]
    bases = {c.base for c in plan if c.base is not None}
    refs: dict[int, list[torch.Tensor]] = {}
    ref_extent: dict[int, int | None] = {}
    kept: dict[int, list[torch.Tensor]] = {}
    singles: dict[int, list[torch.Tensor]] = {}
    """Random row -> its outputs computed alone."""
    previous: tuple[Context, list[torch.Tensor]] | None = None
    matched: list[int] = []
    for index, ctx in enumerate(plan):
        b = ctx.batch_size
        batch = pools.build(ctx)
        base = plan[ctx.base] if ctx.base is not None else None
        suffix = f" [{dtype}, {_dims_text(pools, batch.extent)}]"

        def where(pos: int, ctx: Context = ctx, base: Context | None = base, suffix: str = suffix) -> str:
            return ctx.describe(pos, base) + suffix

        try:
            outs = as_outputs(fn(*batch.args))
        except HarnessError:
            raise
        except Exception as exc:  # noqa: BLE001 - the candidate failed in this context
            return Outcome(error=f"{describe_exception(exc)}; in {where(0)}", calls=index + 1)
        problem = _shape_problem(task, outs, b, pools.device)
        if problem:
            return Outcome(error=f"{problem}; in {where(0)}", calls=index + 1)
        rows_of = lambda t, values: t.index_select(0, torch.tensor(values, dtype=torch.long, device=t.device))
        # Clone what later contexts compare with: the candidate may reuse its output buffers.
        keep = ctx.kind in ("alone", "single", "batch") or index in bases
        mine = [outs[i].clone() for i in batched] if keep else []
        if ctx.kind == "single":
            singles[ctx.slots[0].row] = mine
        if ctx.kind == "alone":
            refs[ctx.probes[0]], ref_extent[ctx.probes[0]] = mine, batch.extent
        if index in bases:
            kept[index] = mine
        found = None
        if ctx.probes and ctx.kind != "alone":
            positions = sorted(ctx.probes)
            for k, i in enumerate(batched):
                want = torch.cat([refs[ctx.probes[p]][k] for p in positions])
                diff = _first_difference(rows_of(outs[i], positions), want)
                if diff:
                    pos = positions[diff[0]]
                    pid = ctx.probes[pos]
                    alone = "" if ref_extent[pid] is None else f"; padded length {ref_extent[pid]} alone"
                    if pid == NEAR_TIE:
                        alone += ("; the near-tie probe: a few values within two ulps of each row's "
                                  "maximum along the last axis")
                    context = f"{where(pos)}{alone}; identical before in batches of {_sizes_text(matched)}"
                    found = Counterexample(output=i, row=pid, batch_size=b, position=pos,
                                           reference_batch_size=1, max_abs_diff=diff[2],
                                           mismatched_elements=diff[1], context=context)
                    break
        # (reference batch size, its outputs, positions here, rows there, row ids, note)
        comparisons: list[tuple[int, list[torch.Tensor], list[int], list[int], list[int], str]] = []
        if base is not None:
            order = ctx.order or []
            comparisons.append((base.batch_size, kept[ctx.base], list(range(b)), order, order, ""))
        alone_rows = [p for p, s in enumerate(ctx.slots) if ctx.kind in ("batch", "beyond")
                      and p not in ctx.probes and s.pool == "random" and s.row in singles]
        if alone_rows:
            ids = [ctx.slots[p].row for p in alone_rows]
            stacked = [torch.cat([singles[r][k] for r in ids]) for k in range(len(batched))]
            comparisons.append((1, stacked, alone_rows, list(range(len(ids))), ids,
                                "; compared with the same co-batched row computed alone (batch 1)"))
        if previous is not None and ctx.kind == "batch":
            prev_ctx, prev_outs = previous
            seen = {slot: p for p, slot in enumerate(prev_ctx.slots) if p not in prev_ctx.probes}
            shared = [(p, seen[s]) for p, s in enumerate(ctx.slots) if p not in ctx.probes and s in seen]
            if shared:
                note = f"; compared with the same co-batched row in the batch of {prev_ctx.batch_size}"
                here, there = [p for p, _ in shared], [q for _, q in shared]
                comparisons.append((prev_ctx.batch_size, prev_outs, here, there, there, note))
        for ref_b, other_outs, here, there, ids, note in comparisons:
            for k, i in enumerate(batched):
                if found:
                    break
                diff = _first_difference(rows_of(outs[i], here), rows_of(other_outs[k], there))
                if diff:
                    j = diff[0]
                    found = Counterexample(output=i, row=ids[j], batch_size=b, position=here[j],
                                           reference_batch_size=ref_b, max_abs_diff=diff[2],
                                           mismatched_elements=diff[1], context=where(here[j]) + note)
        if found:
            return Outcome(found, calls=index + 1)
        if ctx.kind == "batch":
            matched.append(b)
            previous = (ctx, mine)
    return Outcome(calls=len(plan))


def _sizes_text(sizes: list[int]) -> str:
    return "1" + "".join(f", {b}" for b in sorted(set(sizes)))
