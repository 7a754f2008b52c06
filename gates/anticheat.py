"""Anti-cheat checks: behaviour that can pass a correctness comparison without computing the
operator honestly, or that breaks a serving engine around the kernel.

Rejected (error): writing to an input (AC001), returning cached or stale results (AC002),
running the task's reference (AC003), returning an output that shares memory with an input
(AC004), changing global torch settings (AC006). Warned: launching no Triton kernel (AC005).
"""

from __future__ import annotations

from typing import Any

import torch

from gates.batching import as_bits
from gates.contract import Task
from gates.plan import gate_dtypes
from gates.reference import as_outputs, make_inputs, reference_fn
from gates.remote import Runner
from gates.verdict import Finding

SEED = 1000
HINTS = {
    "AC001": "Treat inputs as read-only: write results into freshly allocated outputs.",
    "AC002": "Compute every call from its inputs; no caching by shape, pointer or call count, and a "
             "fresh output tensor per call.",
    "AC003": "Implement the operator yourself; do not import or call the task's reference.",
    "AC004": "Allocate each output (torch.empty / empty_like) instead of returning or viewing an input.",
    "AC005": "The task asks for a Triton kernel; a wrapper around torch ops is allowed but gains little.",
    "AC006": "Leave global torch settings (default dtype, TF32, determinism, threads) as they are.",
}


def _finding(rule: str, message: str, severity: str = "error") -> Finding:
    return Finding(rule=rule, severity=severity, message=message, hint=HINTS[rule])


def _tensors(values: list[Any]) -> list[tuple[int, torch.Tensor]]:
    return [(i, v) for i, v in enumerate(values) if isinstance(v, torch.Tensor)]


def _same_bits(a: Any, b: Any) -> bool:
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
            and a.dtype == b.dtype and torch.equal(as_bits(a), as_bits(b)))


def _all_same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(_same_bits(x, y) for x, y in zip(a, b, strict=True))


def anticheat_shape(task: Task, device: str) -> dict[str, int]:
    """A small task shape with at least two rows."""
    shapes = task.shapes_for(device)
    several = [s for s in shapes if s[task.batch_axis] >= 2]
    return min(several or shapes, key=lambda s: s[task.batch_axis])


def anticheat_findings(runner: Runner, import_changes: list[str], task: Task,
                       device: str) -> list[Finding]:
    """Run the checks with a few calls at one small shape in the candidate's runner; what the
    runner reports (writes to inputs, aliasing, reused buffers, launches, settings) comes back
    with each call. Exceptions from the candidate propagate to the caller."""
    dims, dtype = anticheat_shape(task, device), gate_dtypes(task, device)[0]
    names = [a.name for a in task.args]
    out_names = [o.name for o in task.outputs]
    ref = reference_fn(task)
    inputs = lambda seed: list(make_inputs(task, dims, dtype, seed, device).values())
    findings = [_finding("AC006", f"importing the candidate changed {c}") for c in import_changes]

    a = inputs(SEED)
    before = [(i, t.clone()) for i, t in _tensors(a)]
    first = runner.call(a, track=True)
    for i, old in before:
        if i in first.mutated or not _same_bits(a[i], old):
            changed = int((as_bits(a[i]) != as_bits(old)).sum())
            findings.append(_finding("AC001", f"the candidate wrote to its input {names[i]} "
                                              f"({changed} of {old.numel()} elements changed)"))
    for k, i in first.aliases:
        name = out_names[k] if k < len(out_names) else str(k)
        findings.append(_finding("AC004", f"output {name} shares memory with input {names[i]}"))
    kept_a = first.outs

    # Same shape, new values: in new tensors, then written into the first call's own tensors.
    b = inputs(SEED + 1)
    ref_a, ref_b = as_outputs(ref(*inputs(SEED))), as_outputs(ref(*inputs(SEED + 1)))
    second = runner.call(b, track=True)
    if second.reused:
        findings.append(_finding("AC002", "the candidate overwrote the result of its previous call "
                                          "(it reuses one output buffer across calls)"))
    for (_, t), (_, v) in zip(_tensors(a), _tensors(b), strict=True):
        t.copy_(v)
    third = runner.call(a, track=True)
    if not _all_same(ref_a, ref_b):
        if _all_same(second.outs, kept_a):
            findings.append(_finding("AC002", "the candidate returned the result of an earlier call with "
                                              "different inputs of the same shape (cached by shape)"))
        elif _all_same(third.outs, kept_a):
            findings.append(_finding("AC002", "the candidate returned a stale result after its input tensors "
                                              "were refilled in place (cached by tensor identity)"))
    if first.launches + second.launches + third.launches == 0:
        findings.append(_finding("AC005", "the candidate launched no Triton kernel", severity="warning"))
    for report in (first, second, third):
        findings += [_finding("AC006", f"calling the candidate changed {c}") for c in report.state_changes
                     if not any(c in f.message for f in findings)]
    return findings
