"""Anti-cheat checks: behaviour that can pass a correctness comparison without computing the
operator honestly, or that breaks a serving engine around the kernel.

Rejected (error): writing to an input (AC001), returning cached or stale results (AC002),
running the task's reference (AC003), returning an output that shares memory with an input
(AC004), changing global torch settings (AC006). Warned: launching no Triton kernel (AC005).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from gates.batching import as_bits
from gates.candidate import LoadedCandidate, torch_global_state
from gates.contract import Task
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


@contextmanager
def watch_calls(reference_files: set[str]) -> Iterator[dict[str, Any]]:
    """Count Triton kernel launches and note any execution of the reference's code while the
    body runs."""
    seen: dict[str, Any] = {"launches": 0, "reference": None}
    patched = []
    for module, name in (("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter",
                                                                  "InterpretedFunction")):
        try:
            cls = getattr(__import__(module, fromlist=[name]), name)
        except (ImportError, AttributeError):
            continue
        original = getattr(cls, "run", None)
        if original is None:
            continue

        def counting(self, *args, _original=original, **kwargs):
            if not kwargs.get("warmup"):
                seen["launches"] += 1
            return _original(self, *args, **kwargs)

        own = "run" in cls.__dict__
        cls.run = counting
        patched.append((cls, original if own else None))
    known: dict[str, bool] = {}

    def profile(frame, event, arg):
        if event == "call" and seen["reference"] is None:
            name = frame.f_code.co_filename
            if name not in known:
                known[name] = os.path.realpath(name) in reference_files
            if known[name]:
                seen["reference"] = f"{frame.f_code.co_name} in {os.path.basename(name)}"

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)
        for cls, original in patched:
            if original is None:
                del cls.run  # it was inherited
            else:
                cls.run = original


def _tensors(values: list[Any]) -> list[tuple[int, torch.Tensor]]:
    return [(i, v) for i, v in enumerate(values) if isinstance(v, torch.Tensor)]


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


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


def anticheat_findings(fn: Callable, loaded: LoadedCandidate | None, task: Task,
                       device: str) -> list[Finding]:
    """Run the checks with a few calls at one small shape; exceptions from the candidate
    propagate to the caller."""
    dims, dtype = anticheat_shape(task, device), gate_dtypes(task, device)[0]
    names = [a.name for a in task.args]
    out_names = [o.name for o in task.outputs]
    ref = reference_fn(task)
    reference_file = os.path.realpath(task.reference_path)
    inputs = lambda seed: list(make_inputs(task, dims, dtype, seed, device).values())
    findings: list[Finding] = []
    state = torch_global_state()
    if loaded is not None:
        findings += [_finding("AC006", f"importing the candidate changed {c}") for c in loaded.state_changes]
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path) == reference_file and not name.startswith("agentloop_reference_"):
            findings.append(_finding("AC003", f"the task's reference is imported (as module {name!r})"))

    a = inputs(SEED)
    before = [(i, t.clone()) for i, t in _tensors(a)]
    with watch_calls({reference_file}) as seen:
        out_a = as_outputs(fn(*a))
    if seen["reference"]:
        findings.append(_finding("AC003", f"the candidate runs the task's reference ({seen['reference']})"))
    for i, old in before:
        if not _same_bits(a[i], old):
            changed = int((as_bits(a[i]) != as_bits(old)).sum())
            findings.append(_finding("AC001", f"the candidate wrote to its input {names[i]} "
                                              f"({changed} of {old.numel()} elements changed)"))
    for k, out in enumerate(out_a):
        for i, t in _tensors(a):
            if isinstance(out, torch.Tensor) and _storage(out) == _storage(t):
                name = out_names[k] if k < len(out_names) else str(k)
                findings.append(_finding("AC004", f"output {name} shares memory with input {names[i]}"))
    kept_a = tuple(o.clone() if isinstance(o, torch.Tensor) else o for o in out_a)

    # Same shape, new values: in new tensors, then written into the first call's own tensors.
    b = inputs(SEED + 1)
    ref_a, ref_b = as_outputs(ref(*inputs(SEED))), as_outputs(ref(*inputs(SEED + 1)))
    with watch_calls(set()) as seen_b:
        out_b = as_outputs(fn(*b))
        if not _all_same(out_a, kept_a):
            findings.append(_finding("AC002", "the candidate overwrote the result of its previous call "
                                              "(it reuses one output buffer across calls)"))
        for (_, t), (_, v) in zip(_tensors(a), _tensors(b), strict=True):
            t.copy_(v)
        out_c = as_outputs(fn(*a))
    if not _all_same(ref_a, ref_b):
        if _all_same(out_b, kept_a):
            findings.append(_finding("AC002", "the candidate returned the result of an earlier call with "
                                              "different inputs of the same shape (cached by shape)"))
        elif _all_same(out_c, kept_a):
            findings.append(_finding("AC002", "the candidate returned a stale result after its input tensors "
                                              "were refilled in place (cached by tensor identity)"))
    if seen["launches"] + seen_b["launches"] == 0:
        findings.append(_finding("AC005", "the candidate launched no Triton kernel", severity="warning"))
    after = torch_global_state()
    findings += [_finding("AC006", f"calling the candidate changed {k}: {state[k]!r} -> {after[k]!r}")
                 for k in state if state[k] != after[k]]
    return findings
