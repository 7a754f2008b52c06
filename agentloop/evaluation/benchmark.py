"""Candidate-versus-reference speedups, and against the task's production baselines, timed with
`agentloop.evaluation.timer`.

A candidate, its reference and the task's production baselines (trusted code, run here in the
judge like the reference) are timed on the same inputs, interleaved in rounds (candidate,
reference, baselines, then backwards, ...) so clock drift and thermal changes hit all alike; the
candidate is then re-checked against the reference on fresh inputs, so one that was correct only
on the inputs it was gated on is caught.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from pydantic import BaseModel, Field

from agentloop.evaluation.timer import (
    BenchSettings,
    Clock,
    TimedCallError,
    Timing,
    error_line,
    is_cuda,
    sync,
    time_interleaved,
)
from gates.contract import Baseline, Task
from gates.correctness import compare_outputs
from gates.judge.client import CandidateFailure, RemoteEntry, Runner, sandbox_finding
from gates.reference import as_outputs, baseline_fn, make_inputs
from gates.verdict import Finding

# Bench shapes are GPU sizes; in Triton's interpreter a row of a kernel costs milliseconds.
CPU_BATCH_CAP = 8


class ShapeTiming(BaseModel):
    """Candidate and reference at one shape; speedup = reference median / candidate median."""

    dims: dict[str, int]
    candidate: Timing = Timing()
    reference: Timing = Timing()
    compiled_reference: Timing | None = None
    speedup: float = -1.0
    compiled_speedup: float | None = None
    """Speedup over the `torch.compile`d reference, when that baseline ran."""
    baselines: dict[str, Timing] = Field(default_factory=dict)
    """Each production baseline that ran at this shape, by name."""
    baseline_speedups: dict[str, float] = Field(default_factory=dict)
    """Baseline median / candidate median, per baseline."""
    fastest_baseline: str | None = None
    """The production baseline with the lowest median at this shape."""
    production_speedup: float | None = None
    """Fastest baseline's median / candidate median: above 1 the candidate beats every
    production baseline at this shape."""


class BenchmarkResult(BaseModel):
    """One candidate benchmarked on a task. Safe defaults: not correct, speedup -1, until measured.

    `speedup` (geomean over shapes) stays -1 when the candidate failed the re-check on fresh
    inputs or raised, so nothing can rank a wrong kernel by its speed; `shapes` keeps what was
    timed.
    """

    task: str
    dtype: str
    device: str
    device_name: str = ""
    clock: Clock | None = None
    l2_flush: bool = True
    shapes: list[ShapeTiming] = Field(default_factory=list)
    speedup: float = -1.0
    compiled_speedup: float | None = None
    compiled_error: str | None = None
    """Why the `torch.compile` baseline was skipped, one line."""
    baseline_speedups: dict[str, float] = Field(default_factory=dict)
    """Geomean over the shapes of the speedup over each production baseline that ran at all of
    them (a correct candidate only)."""
    production_speedup: float | None = None
    """Geomean over the shapes of the speedup over the fastest production baseline at each shape
    (a correct candidate only; None when no baseline ran)."""
    baselines_unavailable: dict[str, str] = Field(default_factory=dict)
    """Production baselines that could not be timed here, with why (one line): torch.compile
    missing, an op this device lacks, a wrong output."""
    findings: list[Finding] = Field(default_factory=list)
    """What the candidate's runner did that evaluations refuse (SB rules), or a timed call whose
    output was wrong (SB009); any of them makes the result incorrect."""
    correct: bool = False
    """The re-check on fresh inputs after timing passed at every shape."""
    error: str | None = None
    """Why the candidate could not be timed or re-checked, one line."""
    seconds: float = 0.0


# Statistics --------------------------------------------------------------------------------
def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values; -1 when there are none or one is not positive."""
    if not values or any(v <= 0 for v in values):
        return -1.0
    return math.exp(statistics.fmean(math.log(v) for v in values))


# Candidate versus reference ----------------------------------------------------------------
def bench_dims(task: Task, device: str,
               shapes: Sequence[Mapping[str, int]] | None = None) -> list[dict[str, int]]:
    """Full dimensions of the shapes to time. Default: the task's bench shapes; on a CPU, capped
    to the CPU dims and a batch of at most CPU_BATCH_CAP rows (duplicates dropped)."""
    if shapes is not None:
        return [task.dims_for(device, dict(s)) for s in shapes]
    if is_cuda(device):
        return [task.dims_for("cuda", s) for s in task.bench_shapes]
    out: list[dict[str, int]] = []
    for shape in task.bench_shapes:
        dims = dict(task.cpu_dims)
        for axis, size in shape.items():
            cap = CPU_BATCH_CAP if axis == task.batch_axis else task.cpu_dims[axis]
            dims[axis] = min(size, cap)
        if dims not in out:
            out.append(dims)
    return out


def clone_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of keyword arguments with every tensor cloned (cheaper than generating them again,
    and no function can see another's writes)."""
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


WALL_SLACK_S = 0.005
"""A chunk's reported device time may exceed the judge's wall clock around it by this much
(clock granularity); more is impossible, so the report is forged."""


class RemotePrepared:
    """A candidate prepared for timing in its runner. Every chunk of timed calls is checked
    here: its reported times must fit in the wall-clock time the judge saw pass, and the output
    of one of its calls, chosen only after the chunk ran, must match the reference (SB009)."""

    def __init__(self, runner: Runner, args: Mapping[str, Any], want: tuple, task: Task, dtype: str,
                 settings: BenchSettings) -> None:
        self.runner, self.want, self.task, self.dtype = runner, want, task, dtype
        self.label = runner.bench_prepare(list(args.values()), dataclasses.asdict(settings.measure()))
        self.random = random.Random(os.urandom(8))

    def reps_for(self, seconds: float, min_reps: int, max_reps: int) -> int:
        return self.runner.bench_reps(seconds, min_reps, max_reps)

    def samples(self, n: int) -> list[float]:
        samples, wall, kept = self.runner.bench_samples(n)
        if sum(samples) / 1e3 > wall + WALL_SLACK_S:
            self._refuse(f"the runner reported {sum(samples):.3f} ms of timed calls within "
                         f"{wall * 1e3:.3f} ms of wall-clock time")
        index = self.random.randrange(n - kept, n)  # on a GPU, only the last chunk is kept
        problem = compare_outputs(self.task, self.dtype, self.runner.bench_reveal(index - (n - kept)),
                                  self.want)
        if problem:
            self._refuse(f"timed call {index + 1} of {n} returned a wrong output: {problem[1]}")
        return samples

    def _refuse(self, message: str) -> None:
        self.runner.findings.append(sandbox_finding("SB009", message))
        raise CandidateFailure(message, "SB009")


class RemoteCandidate:
    """The candidate in its runner, as `time_interleaved` times it."""

    def __init__(self, runner: Runner, reference_fn: Callable, task: Task, dtype: str) -> None:
        self.runner, self.reference_fn, self.task, self.dtype = runner, reference_fn, task, dtype

    def prepare(self, args: Mapping[str, Any], settings: BenchSettings) -> RemotePrepared:
        want = as_outputs(self.reference_fn(**clone_inputs(args)))
        return RemotePrepared(self.runner, args, want, self.task, self.dtype, settings)


def recheck(candidate_fn: Callable, reference_fn: Callable, task: Task, dims_list: Sequence[dict[str, int]],
            dtype: str, device: str, seed: int) -> str | None:
    """Compare candidate and reference on fresh inputs (new seeds) at every shape; the first
    mismatch, one line, or None."""
    for i, dims in enumerate(dims_list):
        fresh = make_inputs(task, dims, dtype, seed + 7919 * (i + 1), device, on_device=True)
        want = reference_fn(**clone_inputs(fresh))
        got = candidate_fn(**fresh)
        problem = compare_outputs(task, dtype, as_outputs(got), as_outputs(want))
        if problem:
            return f"wrong on fresh inputs after timing at {dims}: {problem[1]}"
    return None


def timed_baselines(task: Task, compile_reference: bool, production: bool = True) -> list[Baseline]:
    """The production baselines to time: the task's eager ones, and with `compile_reference` its
    `compile: true` ones too (a compiled reference is added when the task declares none, so the
    `compiled_*` fields keep their meaning for every task). Without `production`, only the
    compiled reference (when asked for)."""
    chosen = [b for b in task.baselines if (compile_reference or not b.compile)
              and (production or is_compiled_reference(b))]
    if compile_reference and not any(is_compiled_reference(b) for b in chosen):
        chosen.append(Baseline(name="compiled_reference", summary="the reference under torch.compile",
                               source="reference", compile=True))
    return chosen


def is_compiled_reference(baseline: Baseline) -> bool:
    return baseline.source == "reference" and baseline.compile


def load_baselines(task: Task, baselines: Sequence[Baseline]) -> tuple[dict[str, Callable], dict[str, str]]:
    """(function by name, reason by name) for each baseline: loaded (and wrapped by
    `torch.compile`, which compiles lazily at the first call), or why it cannot be."""
    fns: dict[str, Callable] = {}
    unavailable: dict[str, str] = {}
    for b in baselines:
        try:
            fn = baseline_fn(task, b)
            fns[b.name] = torch.compile(fn, dynamic=False) if b.compile else fn
        except Exception as exc:  # noqa: BLE001 - a torch without dynamo, a module that fails to import
            unavailable[b.name] = error_line(exc)
    return fns, unavailable


def _first_calls(fns: dict[str, Callable], make_args: Callable[[], dict], want: tuple, task: Task,
                 dtype: str, device: str, dims: dict[str, int]) -> dict[str, str]:
    """Call each baseline once at a shape (the first call compiles a `torch.compile`d one) and
    compare it with the reference; the ones that raised or were wrong, with why."""
    failed: dict[str, str] = {}
    for name, fn in fns.items():
        try:
            got = as_outputs(fn(**make_args()))
            sync(device)
        except Exception as exc:  # noqa: BLE001 - no compiler toolchain, an op this device lacks
            failed[name] = error_line(exc)
            continue
        problem = compare_outputs(task, dtype, got, want)
        if problem:
            failed[name] = f"wrong output at {dims}: {problem[1]}"
    return failed


def _ratio(slow_ms: float, fast_ms: float) -> float:
    return slow_ms / fast_ms if slow_ms > 0 and fast_ms > 0 else -1.0


def device_name(device: str) -> str:
    if is_cuda(device):
        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine()


def _shape_timing(dims: dict[str, int], timings: Mapping[str, Timing], baselines: Sequence[str],
                  compiled: str | None) -> ShapeTiming:
    shape = ShapeTiming(dims=dims, candidate=timings["candidate"], reference=timings["reference"])
    shape.speedup = _ratio(shape.reference.median_ms, shape.candidate.median_ms)
    shape.baselines = {name: timings[name] for name in baselines if name in timings}
    shape.baseline_speedups = {name: _ratio(t.median_ms, shape.candidate.median_ms)
                               for name, t in shape.baselines.items()}
    ran = {name: t for name, t in shape.baselines.items() if t.median_ms > 0}
    if ran:
        shape.fastest_baseline = min(ran, key=lambda name: ran[name].median_ms)
        shape.production_speedup = _ratio(ran[shape.fastest_baseline].median_ms, shape.candidate.median_ms)
    if compiled is not None and compiled in timings:
        shape.compiled_reference = timings[compiled]
        shape.compiled_speedup = _ratio(shape.compiled_reference.median_ms, shape.candidate.median_ms)
    return shape


def benchmark_candidate(candidate: Callable | Runner, reference_fn: Callable, task: Task, device: str,
                        shapes: Sequence[Mapping[str, int]] | None = None, dtype: str | None = None,
                        compile_reference: bool = False, settings: BenchSettings | None = None,
                        seed: int = 0, baselines: Sequence[Baseline] | None = None) -> BenchmarkResult:
    """Time candidate, reference and the task's production baselines interleaved on the task's
    bench shapes, then re-check the candidate on fresh inputs. Nothing raises out of it: a
    function that raises gives a result with `error` naming it ("candidate raised ..."); a
    baseline that cannot run (no torch.compile, an op this device lacks, a wrong output) is left
    out and named in `baselines_unavailable`.

    `candidate` is a caged runner holding the candidate (evaluations: timed there, checked here)
    or a function in this process (the harness, tests); its findings end up in `findings`.
    `baselines` defaults to `timed_baselines(task, compile_reference)`."""
    started = time.perf_counter()
    runner = candidate if isinstance(candidate, Runner) else None
    candidate_fn = RemoteEntry(runner) if runner else candidate
    settings = settings or BenchSettings.for_device(device)
    dtype = dtype or task.dtypes[0]
    result = BenchmarkResult(task=task.name, dtype=dtype, device=str(device), device_name=device_name(device),
                             l2_flush=settings.l2_flush)
    dims_list = bench_dims(task, device, shapes)
    chosen = list(baselines) if baselines is not None else timed_baselines(task, compile_reference)
    compiled = next((b.name for b in chosen if is_compiled_reference(b)), None) if compile_reference else None
    live, unavailable = load_baselines(task, chosen)
    stage = "making inputs"
    try:
        for dims in dims_list:
            stage = f"making inputs at {dims}"
            make_args = functools.partial(clone_inputs, make_inputs(task, dims, dtype, seed, device,
                                                                    on_device=True))
            if live:
                stage = f"reference at {dims}"
                want = as_outputs(reference_fn(**make_args()))
                for name, why in _first_calls(live, make_args, want, task, dtype, device, dims).items():
                    unavailable[name] = why
                    del live[name]
            stage = f"timing at {dims}"
            while True:
                fns: dict[str, Any] = {"candidate": candidate_fn, "reference": reference_fn, **live}
                if runner is not None:
                    fns["candidate"] = RemoteCandidate(runner, reference_fn, task, dtype)
                try:
                    timings = time_interleaved(fns, make_args, device, settings)
                    break
                except TimedCallError as exc:  # a baseline failing while timed is left out, not the candidate
                    if exc.name not in live:
                        raise
                    unavailable[exc.name] = f"at {dims}: {exc}"
                    del live[exc.name]
            shape = _shape_timing(dims, timings, [b.name for b in chosen], compiled)
            result.shapes.append(shape)
            result.clock = shape.candidate.clock
        stage = "re-check on fresh inputs"
        problem = recheck(candidate_fn, reference_fn, task, dims_list, dtype, device, seed)
    except Exception as exc:
        result.error = str(exc) if isinstance(exc, TimedCallError) else f"{stage}: {error_line(exc)}"
        return _with_findings(_with_unavailable(result, unavailable, compiled), runner, started)
    result.correct = problem is None
    result.error = problem
    _with_unavailable(result, unavailable, compiled)
    if result.correct:
        result.speedup = geomean([s.speedup for s in result.shapes])
        if compiled is not None and compiled in live:
            result.compiled_speedup = geomean([s.compiled_speedup or -1.0 for s in result.shapes])
        result.baseline_speedups = {b.name: geomean([s.baseline_speedups[b.name] for s in result.shapes])
                                    for b in chosen if b.name in live}
        production = [s.production_speedup for s in result.shapes]
        if production and all(p is not None for p in production):
            result.production_speedup = geomean(production)
    return _with_findings(result, runner, started)


def _with_unavailable(result: BenchmarkResult, unavailable: dict[str, str],
                      compiled: str | None) -> BenchmarkResult:
    result.baselines_unavailable = dict(unavailable)
    if compiled is not None and compiled in unavailable:
        result.compiled_error = f"torch.compile baseline skipped: {unavailable[compiled]}"
    return result


def _with_findings(result: BenchmarkResult, runner: Runner | None, started: float) -> BenchmarkResult:
    """The result with what the runner did besides (any finding makes it incorrect)."""
    if runner is not None:
        if runner.alive:
            runner.check_leftovers()
        result.findings = runner.take_findings()
    if result.findings:
        result.correct, result.speedup, result.compiled_speedup = False, -1.0, None
        result.baseline_speedups, result.production_speedup = {}, None
        result.error = result.error or f"{result.findings[0].rule}: {result.findings[0].message}"
    result.seconds = time.perf_counter() - started
    return result
