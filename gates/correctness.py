"""The correctness gate: the candidate against the task's reference over the task's shapes and
dtypes, within the task's tolerances, on several seeds; the anti-cheat checks run in the same
job. Failures name the output, the shape, the dtype, the seed and the first offending element.
On a GPU the inputs are drawn on the device (`make_inputs(on_device=True)`): drawing the task
shapes' hundreds of millions of elements on the CPU took most of the gate's time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from gates.anticheat import anticheat_findings
from gates.candidate import describe_exception
from gates.contract import Task, Tolerance
from gates.judge.client import RemoteEntry, Runner
from gates.judge.runner_pool import run_gate
from gates.reference import as_outputs, make_inputs, reference_fn
from gates.verdict import Finding, GateResult

MAX_FINDINGS = 3
HINTS = {
    "CR001": "Return exactly the outputs the task names, in order, as tensors.",
    "CR002": "Allocate outputs with the reference's shape (e.g. torch.empty_like on the right input).",
    "CR003": "Cast the result to the reference's output dtype before storing or returning it.",
    "CR004": "Masked loads need a neutral `other=` (0 for sums, -inf for max); avoid 0/0, log(0) and "
             "sqrt of negatives on masked or padded lanes; do not read past the valid length.",
    "CR005": "Check the formula against the reference, accumulate in float32, mask the tail block, "
             "and pass the scalar arguments (eps, scale, base) through unchanged.",
}
TF32_HINT = ("`tl.dot` on float32 inputs multiplies in TF32 by default (10-bit mantissa, errors around "
             "1e-3); this task asks for IEEE float32 products: pass `input_precision=\"ieee\"` to every "
             "`tl.dot` on float32 data (or `\"tf32x3\"`, three TF32 products, nearly as exact and faster), "
             "and do not cast float32 operands down before the product.")
TF32_BAND = (2e-5, 2e-2)
"""Largest error over the largest reference magnitude that TF32 products give on the task shapes
(measured: ~1e-3 on a K=4096 projection); below, rounding; above, a wrong formula."""
TF32_TOLERANCE = Tolerance(atol=1e-2, rtol=1e-2)
"""Float32 tolerance of a task whose `fp32_matmul` is "tf32" (its products may round to TF32)."""


def tolerance_for(task: Task, dtype: str) -> Tolerance:
    """The task's tolerance for a dtype; float32 at TF32's where the task lets products use TF32."""
    tol = task.tolerance[dtype]
    if dtype == "float32" and task.fp32_matmul == "tf32":
        return Tolerance(atol=max(tol.atol, TF32_TOLERANCE.atol), rtol=max(tol.rtol, TF32_TOLERANCE.rtol))
    return tol


def tf32_suspected(task: Task, dtype: str, got: tuple, want: tuple) -> float | None:
    """The relative error of the first float32 output that differs, when its size is what TF32
    products give and the task asks for IEEE float32 products; else None."""
    if dtype != "float32" or task.fp32_matmul == "tf32":
        return None
    for g, w in zip(got, want, strict=False):
        if not (isinstance(g, torch.Tensor) and g.shape == w.shape and w.dtype == torch.float32
                and g.dtype == w.dtype and w.numel()):
            continue
        finite = torch.isfinite(g) & torch.isfinite(w)
        if not bool(finite.all()):
            return None
        scale = float(w.abs().max())
        error = float((g.double() - w.double()).abs().max())
        if error == 0 or scale == 0:
            continue
        relative = error / scale
        return relative if TF32_BAND[0] < relative < TF32_BAND[1] else None
    return None


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _at(index: int, shape: torch.Size) -> str:
    coords = []
    for size in reversed(shape):
        coords.append(index % size)
        index //= size
    return "[" + ", ".join(str(c) for c in reversed(coords)) + "]"


def compare_output(name: str, got: object, want: torch.Tensor, tol: Tolerance) -> tuple[str, str] | None:
    """None when `got` matches the reference output `want`, else (rule, one-line message)."""
    if not isinstance(got, torch.Tensor):
        return "CR001", f"output {name} is a {type(got).__name__}, expected a tensor"
    if got.shape != want.shape:
        return "CR002", f"output {name} has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return "CR003", f"output {name} has dtype {_short(got.dtype)}, expected {_short(want.dtype)}"
    if got.device.type != want.device.type:
        return "CR001", f"output {name} is on {got.device.type}, expected {want.device.type}"
    n = want.numel()
    if not want.is_floating_point():
        # Quantised int8 values: float rounding of x / scale may land one step away legitimately.
        slack = 1 if want.dtype == torch.int8 else 0
        bad = ((got.long() - want.long()).abs() > slack).reshape(-1)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            return "CR005", (f"output {name}: {int(bad.sum())} of {n} elements differ"
                             f"{' by more than 1' if slack else ''}; first at "
                             f"{_at(i, want.shape)}: got {got.reshape(-1)[i].item()}, "
                             f"expected {want.reshape(-1)[i].item()}")
        return None
    g, w = got.double().reshape(-1), want.double().reshape(-1)
    gnan, wnan = torch.isnan(g), torch.isnan(w)
    for bad, what in ((gnan & ~wnan, "NaN where the reference has a number"),
                      (wnan & ~gnan, "a number where the reference has NaN")):
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            return "CR004", (f"output {name}: {what} at {_at(i, want.shape)} (got {g[i].item():.6g}, "
                             f"expected {w[i].item():.6g}; {int(bad.sum())} of {n} elements)")
    inf = (torch.isinf(g) | torch.isinf(w)) & ~gnan & ~wnan & (g != w)
    if bool(inf.any()):
        i = int(inf.nonzero()[0, 0])
        return "CR004", (f"output {name}: infinity mismatch at {_at(i, want.shape)} (got {g[i].item():.6g}, "
                         f"expected {w[i].item():.6g}; {int(inf.sum())} of {n} elements)")
    finite = torch.isfinite(g) & torch.isfinite(w)
    excess = torch.where(finite, (g - w).abs() - (tol.atol + tol.rtol * w.abs()), torch.zeros_like(g))
    bad = excess > 0
    if bool(bad.any()):
        i = int(excess.argmax())
        return "CR005", (f"output {name}: {int(bad.sum())} of {n} elements differ beyond atol={tol.atol:g} "
                         f"rtol={tol.rtol:g}; worst at {_at(i, want.shape)}: got {g[i].item():.6g}, "
                         f"expected {w[i].item():.6g} (abs diff {abs(g[i] - w[i]).item():.3g})")
    return None


def compare_outputs(task: Task, dtype: str, got: tuple, want: tuple) -> tuple[str, str] | None:
    """The first difference between a candidate's outputs and the reference's, if any."""
    if len(got) != len(want):
        names = ", ".join(o.name for o in task.outputs)
        return "CR001", f"returned {len(got)} output(s), expected {len(want)} ({names})"
    for spec, g, w in zip(task.outputs, got, want, strict=True):
        problem = compare_output(spec.name, g, w, tolerance_for(task, dtype))
        if problem:
            return problem
    return None


def case_text(task: Task, dims: dict[str, int], dtype: str, seed: int) -> str:
    """e.g. "bfloat16 T=17 H=256 seed 0": the batch axis first."""
    ordered = sorted(dims.items(), key=lambda kv: kv[0] != task.batch_axis)
    return f"{dtype} " + " ".join(f"{k}={v}" for k, v in ordered) + f" seed {seed}"


def correctness_gate(fn: Callable, task: Task, device: str, *,
                     seeds: tuple[int, ...] | None = None) -> GateResult:
    """Compare `fn` with the reference on every task shape and dtype (first seed), then on
    further seeds once all of those pass."""
    start = time.perf_counter()
    seeds = seeds or ((0, 1) if device == "cpu" else (0, 1, 2))
    ref = reference_fn(task)
    findings: list[Finding] = []
    failures = 0
    for k, seed in enumerate(seeds):
        if k and failures:
            break
        for dtype in task.dtypes:
            for dims in task.shapes_for(device):
                case = case_text(task, dims, dtype, seed)
                inputs = list(make_inputs(task, dims, dtype, seed, device, on_device=True).values())
                # The reference gets copies: a candidate that writes to its inputs cannot change it.
                want = as_outputs(ref(*[v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]))
                try:
                    got = as_outputs(fn(*inputs))
                except Exception as exc:  # noqa: BLE001 - the candidate failed on this case
                    return GateResult(gate="correctness", passed=False, findings=findings,
                                      error=f"{describe_exception(exc)}; on {case}",
                                      seconds=time.perf_counter() - start)
                problem = compare_outputs(task, dtype, got, want)
                if problem:
                    failures += 1
                    if len(findings) < MAX_FINDINGS:
                        rule, message = problem
                        hint = HINTS[rule]
                        tf32 = tf32_suspected(task, dtype, got, want) if rule == "CR005" else None
                        if tf32 is not None:
                            message += (f"; the error ({tf32:.1g} of the largest value) is the size TF32 "
                                        f"products give, and this task requires IEEE float32 products")
                            hint = TF32_HINT
                        findings.append(Finding(rule=rule, severity="error", message=f"{case}: {message}",
                                                hint=hint))
    if failures > len(findings):
        findings.append(Finding(rule="CR005", severity="error",
                                message=f"{failures} cases failed in all; the first {len(findings)} shown"))
    return GateResult(gate="correctness", passed=not failures, findings=findings,
                      seconds=time.perf_counter() - start)


def correctness_job(code: str, task: Task, device: str) -> GateResult:
    """The correctness gate and the anti-cheat checks as one sandbox job; the candidate runs in
    a caged runner (`gates.judge.client`), the comparisons here."""
    start = time.perf_counter()

    def body(runner: Runner, import_changes: list[str]) -> GateResult:
        # Anti-cheat first, on fresh state: a result cache filled by the correctness runs would
        # otherwise hide behind them.
        try:
            cheats = anticheat_findings(runner, import_changes, task, device, code)
        except Exception as exc:  # noqa: BLE001 - the candidate failed during the checks
            cheats = []
            result = GateResult(gate="correctness", passed=False, error=describe_exception(exc))
        else:
            result = correctness_gate(RemoteEntry(runner), task, device)
        findings = cheats + result.findings
        passed = result.passed and not any(f.severity == "error" for f in findings)
        return result.model_copy(update={"findings": findings, "passed": passed,
                                         "seconds": time.perf_counter() - start})

    return run_gate("correctness", code, task, device, body)
