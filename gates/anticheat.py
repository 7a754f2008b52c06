"""Anti-cheat checks: behaviour that can pass a correctness comparison without computing the
operator honestly, or that breaks a serving engine around the kernel.

Rejected (error): writing to an input (AC001), returning cached or stale results (AC002),
running the task's reference (AC003), returning an output that shares memory with an input
(AC004), changing global torch settings (AC006). Warned: launching no Triton kernel (AC005).
"""

from __future__ import annotations

import ast
import difflib
from typing import Any

import torch

from gates.batching import as_bits
from gates.contract import Task
from gates.judge.client import Runner
from gates.plan import gate_dtypes
from gates.reference import as_outputs, make_inputs, reference_fn
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


COPY_RATIO = 0.9
"""How alike (difflib ratio of canonical AST tokens) a candidate function and the reference's
entry must be to count as a copy of it."""
COPY_MIN_TOKENS = 12


def _tokens(fn: ast.FunctionDef) -> list[str]:
    """The function's body as tokens, with local names numbered in order of first use and
    docstrings and annotations left out: renaming or re-wrapping the reference does not hide it."""
    names: dict[str, str] = {}
    body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) and \
        isinstance(fn.body[0].value, ast.Constant) and isinstance(fn.body[0].value.value, str) else fn.body
    out = [f"args:{len(fn.args.args)}"]
    for arg in fn.args.args:
        names.setdefault(arg.arg, f"v{len(names)}")
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name):
                out.append(names.setdefault(node.id, f"v{len(names)}") if node.id not in dir(__builtins__)
                           else node.id)
            elif isinstance(node, ast.Attribute):
                out.append("." + node.attr)
            elif isinstance(node, ast.Constant):
                out.append(repr(node.value))
            elif not isinstance(node, (ast.expr_context, ast.Load, ast.Store)):
                out.append(type(node).__name__)
    return out


def _reached(tree: ast.Module, entry: str) -> list[ast.FunctionDef]:
    """The module-level functions the entry calls by name, directly or through each other."""
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    seen, todo = [], [entry]
    while todo:
        fn = defs.get(todo.pop())
        if fn is None or fn in seen:
            continue
        seen.append(fn)
        todo += [n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    return seen


def reference_copy_findings(code: str, task: Task, launched: bool) -> list[Finding]:
    """AC003 when a function the candidate's entry can run is the task's reference with other
    names: read from the source, so a copy embedded in the candidate file is found without any
    file access at run time. An error when the candidate launched no Triton kernel (the copy is
    what ran); a warning when it did (a fallback path, often honest)."""
    try:
        tree = ast.parse(code)
        reference = ast.parse(task.reference_path.read_text())
    except (SyntaxError, ValueError, OSError):
        return []
    ref = next((n for n in reference.body if isinstance(n, ast.FunctionDef) and n.name == task.entry), None)
    if ref is None or len(want := _tokens(ref)) < COPY_MIN_TOKENS:
        return []
    for fn in _reached(tree, task.entry):
        ratio = difflib.SequenceMatcher(None, _tokens(fn), want, autojunk=False).ratio()
        if ratio >= COPY_RATIO:
            used = "a fallback beside your kernels" if launched else "what ran: no Triton kernel was launched"
            return [_finding("AC003", f"{fn.name}() at line {fn.lineno} is a copy of the task's reference "
                                      f"{task.entry}() ({ratio:.0%} alike once renamed); {used}",
                             severity="warning" if launched else "error")]
    return []


def anticheat_shape(task: Task, device: str) -> dict[str, int]:
    """A small task shape with at least two rows."""
    shapes = task.shapes_for(device)
    several = [s for s in shapes if s[task.batch_axis] >= 2]
    return min(several or shapes, key=lambda s: s[task.batch_axis])


def anticheat_findings(runner: Runner, import_changes: list[str], task: Task,
                       device: str, code: str | None = None) -> list[Finding]:
    """Run the checks with a few calls at one small shape in the candidate's runner; what the
    runner reports (writes to inputs, aliasing, reused buffers, launches, settings) comes back
    with each call; `code`, the candidate's source, is compared with the reference's.
    Exceptions from the candidate propagate to the caller."""
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
    launched = first.launches + second.launches + third.launches > 0
    if not launched:
        findings.append(_finding("AC005", "the candidate launched no Triton kernel", severity="warning"))
    if code is not None:
        findings += reference_copy_findings(code, task, launched)
    for report in (first, second, third):
        findings += [_finding("AC006", f"calling the candidate changed {c}") for c in report.state_changes
                     if not any(c in f.message for f in findings)]
    return findings
