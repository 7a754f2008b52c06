"""The benchmark: one timer for every measurement, and candidate-versus-reference speedups.

On a GPU each timed call is bracketed by CUDA events, preceded by an L2 flush (a write to a
buffer bigger than L2) so no call finds its inputs in cache, optionally replayed from a CUDA
graph so host launch overhead drops out. On a CPU the same code times with a wall clock, so
campaigns run anywhere; CPU figures only say the plumbing works, not how fast a GPU kernel is.

A candidate and its reference are timed in the same process on the same inputs, interleaved in
rounds (candidate, reference, reference, candidate, ...) so clock drift and thermal changes hit
both alike; the candidate is then re-checked against the reference on fresh inputs, so one that
was correct only on the inputs it was gated on is caught.
"""

from __future__ import annotations

import functools
import math
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
from pydantic import BaseModel, Field

from gates.contract import Task
from gates.correctness import compare_outputs
from gates.reference import as_outputs, make_inputs

Clock = Literal["cuda_event", "cuda_graph", "perf_counter"]

# Bench shapes are GPU sizes; in Triton's interpreter a row of a kernel costs milliseconds.
CPU_BATCH_CAP = 8
FLUSH_BYTES_GPU = 256 * 2**20
FLUSH_BYTES_CPU = 32 * 2**20
"""Bigger than a CPU core's private caches; a large shared L3 may keep part of the inputs."""


class BenchSettings(BaseModel):
    """How hard to measure. `for_device` gives the defaults for a GPU or a CPU."""

    warmup: int = 5
    """Untimed calls before timing; the first compiles (and autotunes) the kernel."""
    warmup_time: float = 0.025
    """Seconds the calls after the first keep going at least (a GPU's clocks rise under load)."""
    min_time: float = 0.05
    """Seconds of timed calls (flushes included) per function per shape; sets the repetitions."""
    min_reps: int = 20
    max_reps: int = 2000
    rounds: int = 4
    """Interleaved rounds per shape; the repetitions are split evenly across them."""
    l2_flush: bool = True
    cuda_graph: bool = False
    """Replay each call from a CUDA graph (GPU only): times the kernels without launch overhead."""

    @classmethod
    def for_device(cls, device: str, **overrides: Any) -> BenchSettings:
        if _is_cuda(device):
            return cls(**overrides)
        return cls(**{"warmup": 1, "warmup_time": 0.0, "min_time": 0.05, "min_reps": 3, "max_reps": 200,
                      "rounds": 2, **overrides})


class Timing(BaseModel):
    """Statistics of one function's timed calls, in milliseconds (-1 until measured)."""

    median_ms: float = -1.0
    q25_ms: float = -1.0
    q75_ms: float = -1.0
    mean_ms: float = -1.0
    min_ms: float = -1.0
    n: int = 0
    clock: Clock | None = None
    samples_ms: list[float] = Field(default_factory=list, exclude=True, repr=False)
    """Every timed call, kept in memory for merging rounds; not serialised."""

    @property
    def iqr_ms(self) -> float:
        return self.q75_ms - self.q25_ms if self.n else -1.0

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float], clock: Clock) -> Timing:
        if not samples_ms:
            return cls(clock=clock)
        q25, q50, q75 = quantiles(samples_ms, (0.25, 0.5, 0.75))
        return cls(median_ms=q50, q25_ms=q25, q75_ms=q75, mean_ms=statistics.fmean(samples_ms),
                   min_ms=min(samples_ms), n=len(samples_ms), clock=clock, samples_ms=list(samples_ms))


class ShapeTiming(BaseModel):
    """Candidate and reference at one shape; speedup = reference median / candidate median."""

    dims: dict[str, int]
    candidate: Timing = Timing()
    reference: Timing = Timing()
    compiled_reference: Timing | None = None
    speedup: float = -1.0
    compiled_speedup: float | None = None
    """Speedup over the `torch.compile`d reference, when that baseline ran."""


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
    correct: bool = False
    """The re-check on fresh inputs after timing passed at every shape."""
    error: str | None = None
    """Why the candidate could not be timed or re-checked, one line."""
    seconds: float = 0.0


# Statistics --------------------------------------------------------------------------------
def quantiles(samples: Sequence[float], qs: Sequence[float]) -> list[float]:
    """Linearly interpolated quantiles (numpy's default, and triton.testing's)."""
    xs = sorted(samples)
    out = []
    for q in qs:
        point = q * (len(xs) - 1)
        lo, hi = math.floor(point), math.ceil(point)
        out.append(xs[lo] + (point - lo) * (xs[hi] - xs[lo]))
    return out


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values; -1 when there are none or one is not positive."""
    if not values or any(v <= 0 for v in values):
        return -1.0
    return math.exp(statistics.fmean(math.log(v) for v in values))


# The timer ---------------------------------------------------------------------------------
def _is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


_flush_buffers: dict[str, torch.Tensor] = {}


def _flush_buffer(device: str) -> torch.Tensor:
    key = str(torch.device(device))
    if key not in _flush_buffers:
        if _is_cuda(device):
            l2 = getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0)
            nbytes = max(FLUSH_BYTES_GPU, 4 * l2)
        else:
            nbytes = FLUSH_BYTES_CPU
        _flush_buffers[key] = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
    return _flush_buffers[key]


def _bind(fn: Callable, args: Any) -> Callable[[], Any]:
    if isinstance(args, Mapping):
        return lambda: fn(**args)
    if isinstance(args, tuple | list):
        return lambda: fn(*args)
    return lambda: fn(args)


def _sync(device: str) -> None:
    if _is_cuda(device):
        torch.cuda.synchronize(torch.device(device))


def _capture_graph(call: Callable[[], Any], device: str) -> Callable[[], Any]:
    """A CUDA graph of one call; replaying it re-runs the same kernels on the same buffers."""
    side = torch.cuda.Stream(device=torch.device(device))
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # torch asks for a warm-up on a side stream before capture
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            call()
    except Exception as exc:  # e.g. a host sync (.item(), .cpu()) inside the function
        raise RuntimeError(f"CUDA-graph capture failed: {type(exc).__name__}: {_first_line(exc)}") from None
    _sync(device)
    return graph.replay


class _Prepared:
    """One function bound to its inputs, warmed up, and ready to time."""

    def __init__(self, fn: Callable, make_args: Callable[[], Any], device: str, settings: BenchSettings,
                 clock: Callable[[], float]):
        self.device, self.settings, self.clock = device, settings, clock
        self.cuda = _is_cuda(device)
        self.flush = _flush_buffer(device) if settings.l2_flush else None
        call = _bind(fn, make_args())
        if settings.warmup > 0:
            call()  # compiles: kept out of the warm-up time
            _sync(device)
            calls, start = 1, time.perf_counter()
            while calls < settings.warmup or time.perf_counter() - start < settings.warmup_time:
                call()
                calls += 1
                if calls % 8 == 0:
                    _sync(device)  # so the loop sees GPU time, not only launch time
            _sync(device)
        if settings.cuda_graph:
            if not self.cuda:
                raise ValueError("cuda_graph=True needs a CUDA device")
            call = _capture_graph(call, device)
        self.call = call
        self.label: Clock = ("cuda_graph" if settings.cuda_graph else "cuda_event") if self.cuda \
            else "perf_counter"

    def reps_for(self, seconds: float) -> int:
        """Repetitions that fill `seconds`, from three wall-timed calls (flushes included)."""
        start = time.perf_counter()
        for _ in range(3):
            if self.flush is not None:
                self.flush.zero_()
            self.call()
        _sync(self.device)
        per_call = max((time.perf_counter() - start) / 3, 1e-9)
        return max(self.settings.min_reps, min(self.settings.max_reps, math.ceil(seconds / per_call)))

    def samples(self, reps: int) -> list[float]:
        """Milliseconds of `reps` timed calls, each after an L2 flush (when enabled)."""
        if self.cuda:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            _sync(self.device)
            for start, end in zip(starts, ends, strict=True):
                if self.flush is not None:
                    self.flush.zero_()
                start.record()
                self.call()
                end.record()
            _sync(self.device)
            return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
        out = []
        for _ in range(reps):
            if self.flush is not None:
                self.flush.zero_()
            t0 = self.clock()
            self.call()
            out.append((self.clock() - t0) * 1e3)
        return out


def time_callable(fn: Callable, make_args: Callable[[], Any], device: str, *, warmup: int | None = None,
                  reps: int | None = None, min_time: float | None = None, l2_flush: bool = True,
                  cuda_graph: bool = False, clock: Callable[[], float] = time.perf_counter) -> Timing:
    """Time `fn` called on `make_args()` (a dict of keyword arguments, or a tuple of positional
    ones; made once, reused by every call). `reps` fixes the number of timed calls, otherwise
    enough to fill `min_time` seconds. `clock` is the CPU wall clock (replaceable in tests)."""
    given = {k: v for k, v in (("warmup", warmup), ("min_time", min_time)) if v is not None}
    settings = BenchSettings.for_device(device, l2_flush=l2_flush, cuda_graph=cuda_graph, **given)
    prepared = _Prepared(fn, make_args, device, settings, clock)
    n = reps if reps is not None else prepared.reps_for(settings.min_time)
    return Timing.from_samples(prepared.samples(n), prepared.label)


class TimedCallError(RuntimeError):
    """A timed function raised; `name` says which. On a GPU, errors are asynchronous: a fault
    may surface in the next function's call or sync."""

    def __init__(self, name: str, exc: BaseException):
        super().__init__(f"{name} raised {_error_line(exc)}")
        self.name = name


def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """Who runs in which order in a round: forward, then backward (A B, B A, A B, ...), so a
    linear drift adds the same time to every function."""
    return list(names) if round_index % 2 == 0 else list(reversed(names))


def time_interleaved(fns: Mapping[str, Callable], make_args: Callable[[], Any], device: str,
                     settings: BenchSettings | None = None, *, reps: int | None = None,
                     clock: Callable[[], float] = time.perf_counter) -> dict[str, Timing]:
    """Time several functions on equal inputs (each gets its own `make_args()`), interleaved in
    `settings.rounds` rounds; every function's samples from all rounds make its Timing."""
    settings = settings or BenchSettings.for_device(device)
    prepared: dict[str, _Prepared] = {}
    per_round: dict[str, int] = {}
    rounds = max(1, settings.rounds)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    name = ""
    try:
        for name, fn in fns.items():
            prepared[name] = _Prepared(fn, make_args, device, settings, clock)
            wanted = reps if reps is not None else prepared[name].reps_for(settings.min_time)
            per_round[name] = math.ceil(wanted / rounds)
        for r in range(rounds):
            for name in round_order(list(fns), r):
                samples[name] += prepared[name].samples(per_round[name])
    except Exception as exc:
        raise TimedCallError(name, exc) from exc
    return {name: Timing.from_samples(s, prepared[name].label) for name, s in samples.items()}


# Candidate versus reference ----------------------------------------------------------------
def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _error_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_first_line(exc)}"


def bench_dims(task: Task, device: str,
               shapes: Sequence[Mapping[str, int]] | None = None) -> list[dict[str, int]]:
    """Full dimensions of the shapes to time. Default: the task's bench shapes; on a CPU, capped
    to the CPU dims and a batch of at most CPU_BATCH_CAP rows (duplicates dropped)."""
    if shapes is not None:
        return [task.dims_for(device, dict(s)) for s in shapes]
    if _is_cuda(device):
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


def recheck(candidate_fn: Callable, reference_fn: Callable, task: Task, dims_list: Sequence[dict[str, int]],
            dtype: str, device: str, seed: int) -> str | None:
    """Compare candidate and reference on fresh inputs (new seeds) at every shape; the first
    mismatch, one line, or None."""
    for i, dims in enumerate(dims_list):
        fresh = make_inputs(task, dims, dtype, seed + 7919 * (i + 1), device)
        want = reference_fn(**clone_inputs(fresh))
        got = candidate_fn(**fresh)
        problem = compare_outputs(task, dtype, as_outputs(got), as_outputs(want))
        if problem:
            return f"wrong on fresh inputs after timing at {dims}: {problem[1]}"
    return None


def _compile(reference_fn: Callable) -> Callable | None:
    """The reference wrapped by `torch.compile` (compiled lazily at its first call), or None."""
    try:
        return torch.compile(reference_fn, dynamic=False)
    except Exception:  # torch builds without dynamo, unsupported Python versions
        return None


def _ratio(slow_ms: float, fast_ms: float) -> float:
    return slow_ms / fast_ms if slow_ms > 0 and fast_ms > 0 else -1.0


def device_name(device: str) -> str:
    if _is_cuda(device):
        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine()


def benchmark_candidate(candidate_fn: Callable, reference_fn: Callable, task: Task, device: str,
                        shapes: Sequence[Mapping[str, int]] | None = None, dtype: str | None = None,
                        compile_reference: bool = False, settings: BenchSettings | None = None,
                        seed: int = 0) -> BenchmarkResult:
    """Time candidate and reference (and optionally a `torch.compile`d reference) interleaved on
    the task's bench shapes, then re-check the candidate on fresh inputs. Nothing raises out of
    it: a function that raises gives a result with `error` naming it ("candidate raised ...")."""
    started = time.perf_counter()
    settings = settings or BenchSettings.for_device(device)
    dtype = dtype or task.dtypes[0]
    result = BenchmarkResult(task=task.name, dtype=dtype, device=str(device), device_name=device_name(device),
                             l2_flush=settings.l2_flush)
    dims_list = bench_dims(task, device, shapes)
    compiled = _compile(reference_fn) if compile_reference else None
    if compile_reference and compiled is None:
        result.compiled_error = "torch.compile baseline skipped: torch.compile is not available"
    stage = "making inputs"
    try:
        for dims in dims_list:
            stage = f"making inputs at {dims}"
            make_args = functools.partial(clone_inputs, make_inputs(task, dims, dtype, seed, device))
            fns: dict[str, Callable] = {"candidate": candidate_fn, "reference": reference_fn}
            if compiled is not None:
                try:  # the first call compiles; a failure here skips the baseline, not the candidate
                    compiled(**make_args())
                    _sync(device)
                    fns["compiled_reference"] = compiled
                except Exception as exc:  # no compiler toolchain, unsupported backend, ...
                    compiled = None
                    result.compiled_error = f"torch.compile baseline skipped: {_error_line(exc)}"
            timings = time_interleaved(fns, make_args, device, settings)
            shape = ShapeTiming(dims=dims, candidate=timings["candidate"], reference=timings["reference"],
                                compiled_reference=timings.get("compiled_reference"))
            shape.speedup = _ratio(shape.reference.median_ms, shape.candidate.median_ms)
            if shape.compiled_reference is not None:
                shape.compiled_speedup = _ratio(shape.compiled_reference.median_ms, shape.candidate.median_ms)
            result.shapes.append(shape)
            result.clock = shape.candidate.clock
        stage = "re-check on fresh inputs"
        problem = recheck(candidate_fn, reference_fn, task, dims_list, dtype, device, seed)
    except Exception as exc:
        result.error = str(exc) if isinstance(exc, TimedCallError) else f"{stage}: {_error_line(exc)}"
        result.seconds = time.perf_counter() - started
        return result
    result.correct = problem is None
    result.error = problem
    if result.correct:
        result.speedup = geomean([s.speedup for s in result.shapes])
        if compiled is not None:
            result.compiled_speedup = geomean([s.compiled_speedup or -1.0 for s in result.shapes])
    result.seconds = time.perf_counter() - started
    return result
