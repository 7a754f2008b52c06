"""Feedback an LLM can act on: a Verdict rendered as text saying what failed, where, in which
batch context, and which mechanisms usually cause that pattern. The one place that renders
gate results for a model."""

from __future__ import annotations

from gates.contract import Task
from gates.judge.environment import redact
from gates.verdict import Counterexample, Finding, GateResult, Verdict

# Keyed by the context kind that starts Counterexample.context (gates.plan.ContextKind).
MECHANISMS = {
    "batch": (
        "The row's bits changed with the batch size. Usual causes: a split-K / split-reduction count or a "
        "reduction block size chosen from the batch size (e.g. splitting rows when the batch is too small "
        "to fill the GPU); @triton.autotune keyed on the batch dimension, or @triton.heuristics on it, "
        "whose configs change the reduction; different kernels or code paths dispatched by batch size; a "
        "torch / cuBLAS matmul on batched data (its algorithm depends on M); a value reduced over the whole"
        " batch feeding every row. Fix: let nothing that shapes a row's reduction order depend on the batch"
        " size: fixed block sizes and split counts, autotune keys without the batch axis, one program "
        "reducing each row in a fixed order, and a grid that grows with the batch instead."),
    "zeros": (
        "The row's bits changed when only the other rows' values changed. Usual causes: a statistic "
        "computed over the whole batch (a max, a scale, a mean, a norm) feeding each row, or control flow "
        "that depends on other rows' data. Fix: compute every statistic per row."),
    "long": (
        "The row's bits changed when longer co-batched sequences grew the padded length L. Usual causes: "
        "loop bounds, block counts or split-KV counts derived from the batch-wide padded length L (or the "
        "longest sequence) instead of the row's own length; partial results combined in an order that "
        "depends on L. Fix: derive each row's loop bounds and splits from its own seq_len or from "
        "constants, and mask with the row's seq_len."),
    "padding": (
        "The row's bits changed when only the padding beyond its valid length changed. Usual causes: "
        "reading positions >= seq_lens[b] without a mask, or masking with a value that still changes the "
        "result (e.g. 0 instead of -inf before a max/softmax), or loop bounds from the padded extent. Fix: "
        "mask every load with the row's seq_len and use neutral `other=` values."),
    "permuted": (
        "The row's bits changed when only its position in the batch changed. Usual causes: rows processed "
        "together in one tile (tl.dot over BLOCK_M rows), so a row's rounding depends on where it falls in "
        "the tile; results that depend on program ordering; indexing that reads neighbouring rows. Fix: "
        "keep each row's arithmetic independent of its row index and tile placement."),
    "repeat": (
        "The output changed between two calls with identical inputs: the candidate is nondeterministic. "
        "Usual causes: tl.atomic_add (or other atomics) accumulating partial results in a run-dependent "
        "order; reading memory that was never written (torch.empty buffers); races between programs; state "
        "kept across calls (call counters, caches, a config that changes after the first calls). Fix: "
        "reduce in a fixed order without atomics, initialise what you read, and keep no state between "
        "calls."),
    "nonfinite": (
        "Another request's inf or NaN reached this row: the row was computed beside rows holding inf, -inf "
        "and NaN and its bits changed. Usual causes: a value reduced over the whole batch or over a tile of "
        "several rows feeding each row (a batch-wide max, scale or sum, `x.sum()` times 0); a mask applied "
        "by multiplying (`x * mask`, where 0 * inf = NaN) instead of selecting; a 2-D tile reduced along "
        "the wrong axis; loads that read other rows without a row mask. Fix: keep every statistic per row, "
        "select with `tl.where(mask, x, neutral)` and `other=` on loads rather than multiplying by a 0/1 "
        "mask, and reduce along the row's own axis only."),
}
MECHANISMS["large"] = MECHANISMS["zeros"]
CPU_NOTE = ("Measured on the CPU with Triton's interpreter: there tl.dot's rounding of a row depends on its "
            "position in the tile and atomics run one at a time, so this verdict can differ on a GPU.")
ERROR_HINTS = (
    ("timed out", "Look for an infinite loop: a while-loop whose bound never changes, a loop over a runtime "
                  "value that is far too large, or a kernel waiting on a flag; also autotuning over very "
                  "many configs."),
    ("SIGSEGV", "A native crash usually means out-of-bounds memory access: a load or store without a mask, "
                "wrong strides, or offsets that overflow int32 on large tensors."),
    ("illegal memory access", "Out-of-bounds memory access: mask every load and store, check strides and "
                              "pointer arithmetic, and use int64 offsets for large tensors."),
    ("CompilationError", "Triton could not compile the kernel: read the message; common causes are tl.arange "
                         "bounds that are not constexpr powers of two, Python features unsupported inside "
                         "@triton.jit, and dtype mismatches."),
    ("failed to import", "The file must import cleanly with only torch, triton, triton.language, math and "
                         "pure standard-library modules."),
)


def _kind(cx: Counterexample) -> str:
    return cx.context.split(":", 1)[0] if ":" in cx.context else ""


def render_counterexample(cx: Counterexample, task: Task | None = None, device: str | None = None) -> str:
    """A batch-invariance counterexample: what differed, in which context, and why that usually
    happens."""
    name = task.outputs[cx.output].name if task and cx.output < len(task.outputs) else f"#{cx.output}"
    context = cx.context.split(":", 1)[1].strip() if ":" in cx.context else cx.context
    against = "the same row computed alone (batch 1)" if cx.reference_batch_size == 1 \
        else f"the same row computed in a batch of {cx.reference_batch_size} (at position {cx.row})"
    diff = f", max abs diff {cx.max_abs_diff:.3g}" if cx.max_abs_diff is not None else \
        " (to or from inf or NaN)" if _kind(cx) == "nonfinite" else ""
    lines = [f"Batch invariance violated: output `{name}`, row {cx.row}, is not bitwise identical to "
             f"{against}: {cx.mismatched_elements} element(s) differ{diff}.",
             f"Where: {context}."]
    mechanism = MECHANISMS.get(_kind(cx))
    if mechanism:
        lines.append(mechanism)
    if device == "cpu" and _kind(cx) in ("permuted", "batch"):
        lines.append(CPU_NOTE)
    return "\n".join(lines)


def render_findings(findings: list[Finding], title: str) -> str:
    """Findings as a list with lines and fix hints."""
    if not findings:
        return ""
    lines = [title]
    for f in findings:
        where = f"line {f.line}: " if f.line else ""
        lines.append(f"- [{f.rule}] {where}{f.message}")
        if f.hint:
            lines.append(f"  fix: {f.hint}")
    return "\n".join(lines)


def render_error(gate: str, error: str) -> str:
    lines = [f"The {gate} gate could not run the candidate: {error}"]
    lines += [hint for key, hint in ERROR_HINTS if key in error][:1]
    return "\n".join(lines)


TITLES = {"static": "Static analysis found:", "dynamic": "Dynamic batch-invariance check:",
          "correctness": "Correctness and anti-cheat checks found:", "anticheat": "Anti-cheat checks found:",
          "compile": "Compilation:"}


def render_gate(result: GateResult, task: Task | None = None, device: str | None = None) -> str:
    parts = []
    if result.error:
        parts.append(render_error(result.gate, result.error))
    if result.counterexample:
        parts.append(render_counterexample(result.counterexample, task, device))
    errors = [f for f in result.findings if f.severity == "error"]
    warnings = [f for f in result.findings if f.severity == "warning"]
    parts.append(render_findings(errors, TITLES.get(result.gate, f"{result.gate}:")))
    parts.append(render_findings(warnings, f"Warnings ({result.gate}):"))
    return redact("\n".join(p for p in parts if p)) or ""


def render(verdict: Verdict, task: Task | None = None, device: str | None = None) -> str:
    """The whole verdict as feedback: failing gates first, then warnings of passing ones."""
    head = (f"Candidate {verdict.candidate} for task {verdict.task}: "
            f"{'accepted' if verdict.verdict == 'accept' else 'rejected'}"
            + (f" (checked on {device})." if device else "."))
    failed = [render_gate(g, task, device) for g in verdict.gates if not g.passed]
    passed = [render_gate(g, task, device) for g in verdict.gates if g.passed]
    return redact("\n\n".join(p for p in [head, *failed, *passed] if p)) or ""
