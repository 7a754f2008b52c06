"""The timer: one way to time every measurement in the project.

On a GPU each timed call is bracketed by CUDA events, preceded by an L2 flush (a write to a
buffer bigger than L2) so no call finds its inputs in cache, optionally replayed from a CUDA
graph so host launch overhead drops out. On a CPU the same code times with a wall clock, so
campaigns run anywhere; CPU figures only say the plumbing works, not how fast a GPU kernel is.

Several functions timed together are interleaved in rounds (A B, B A, A B, ...) so clock drift
and thermal changes hit all of them alike.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
from pydantic import BaseModel, Field

Clock = Literal["cuda_event", "cuda_graph", "perf_counter"]

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
    queue_ahead: bool = True
    """GPU only: before each chunk of timed calls, hold the stream with a spin kernel long enough
    for the host to enqueue the whole chunk, so the GPU runs flushes and calls back to back and
    the events see device time, not gaps where the GPU waited for the host to launch the next
    kernel. Without it a 5 us kernel's median moved by 1-5 us between runs on an H200."""
    chunk: int = 50
    """Timed calls enqueued behind one hold (and between two host syncs)."""

    @classmethod
    def for_device(cls, device: str, **overrides: Any) -> BenchSettings:
        if is_cuda(device):
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


# The timer ---------------------------------------------------------------------------------
def is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


_flush_buffers: dict[str, torch.Tensor] = {}


def _flush_buffer(device: str) -> torch.Tensor:
    key = str(torch.device(device))
    if key not in _flush_buffers:
        if is_cuda(device):
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


def sync(device: str) -> None:
    if is_cuda(device):
        torch.cuda.synchronize(torch.device(device))


MAX_HEAD_START_MS = 20.0
"""A chunk's hold never exceeds this: a function that syncs with the host inside its call makes
the host wait for the hold, and its measured enqueue time must not grow the next hold forever."""


def head_start_ms(host_ms_per_call: float, calls: int) -> float:
    """How long to hold the GPU before enqueueing `calls` timed calls that each take the host
    `host_ms_per_call` to enqueue (flush, events and the call): 1.5x the expected enqueue time
    plus 0.2 ms for a scheduling hiccup, at most MAX_HEAD_START_MS."""
    return min(MAX_HEAD_START_MS, 1.5 * calls * max(host_ms_per_call, 0.0) + 0.2)


_cycles_per_ms: dict[str, float] = {}


def hold_stream(device: str, ms: float) -> bool:
    """Enqueue a kernel that spins for about `ms` on `device`'s current stream (torch.cuda._sleep,
    whose cycles per millisecond are measured once per device). False where torch lacks it."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return False
    key = str(torch.device(device))
    if key not in _cycles_per_ms:
        cycles, best = 1_000_000, math.inf
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            sleep(cycles)
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end))
        _cycles_per_ms[key] = cycles / max(best, 1e-3)
    sleep(int(ms * _cycles_per_ms[key]))
    return True


def capture_graph(call: Callable[[], Any], device: str) -> Callable[[], Any]:
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
    sync(device)
    return graph.replay


class _Prepared:
    """One function bound to its inputs, warmed up, and ready to time."""

    def __init__(self, fn: Callable, make_args: Callable[[], Any], device: str, settings: BenchSettings,
                 clock: Callable[[], float]):
        self.device, self.settings, self.clock = device, settings, clock
        self.cuda = is_cuda(device)
        self.flush = _flush_buffer(device) if settings.l2_flush else None
        call = _bind(fn, make_args())
        if settings.warmup > 0:
            call()  # compiles: kept out of the warm-up time
            sync(device)
            calls, start = 1, time.perf_counter()
            while calls < settings.warmup or time.perf_counter() - start < settings.warmup_time:
                call()
                calls += 1
                if calls % 8 == 0:
                    sync(device)  # so the loop sees GPU time, not only launch time
            sync(device)
        if settings.cuda_graph:
            if not self.cuda:
                raise ValueError("cuda_graph=True needs a CUDA device")
            call = capture_graph(call, device)
        self.call = call
        self.host_ms: float | None = None
        """Host time to enqueue one timed call, measured in the last chunk (GPU)."""
        self.label: Clock = ("cuda_graph" if settings.cuda_graph else "cuda_event") if self.cuda \
            else "perf_counter"

    def reps_for(self, seconds: float) -> int:
        """Repetitions that fill `seconds`, from three wall-timed calls (flushes included)."""
        start = time.perf_counter()
        for _ in range(3):
            if self.flush is not None:
                self.flush.zero_()
            self.call()
        sync(self.device)
        per_call = max((time.perf_counter() - start) / 3, 1e-9)
        if self.host_ms is None:
            self.host_ms = per_call * 1e3  # wall time, an overestimate until a chunk is measured
        return max(self.settings.min_reps, min(self.settings.max_reps, math.ceil(seconds / per_call)))

    def samples(self, reps: int) -> list[float]:
        """Milliseconds of `reps` timed calls, each after an L2 flush (when enabled)."""
        out: list[float] = []
        if self.cuda:
            for done in range(0, reps, max(1, self.settings.chunk)):
                out += self._gpu_chunk(min(self.settings.chunk, reps - done))
            return out
        for _ in range(reps):
            if self.flush is not None:
                self.flush.zero_()
            t0 = self.clock()
            self.call()
            out.append((self.clock() - t0) * 1e3)
        return out

    def _gpu_chunk(self, n: int) -> list[float]:
        """`n` timed calls enqueued behind a hold (`queue_ahead`), then one sync."""
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        sync(self.device)
        if self.settings.queue_ahead:
            hold_stream(self.device, head_start_ms(self.host_ms or 0.0, n))
        enqueue = time.perf_counter()
        for start, end in zip(starts, ends, strict=True):
            if self.flush is not None:
                self.flush.zero_()
            start.record()
            self.call()
            end.record()
        self.host_ms = (time.perf_counter() - enqueue) * 1e3 / n
        sync(self.device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def time_callable(fn: Callable, make_args: Callable[[], Any], device: str, *, warmup: int | None = None,
                  reps: int | None = None, min_time: float | None = None, l2_flush: bool = True,
                  cuda_graph: bool = False, queue_ahead: bool = True,
                  clock: Callable[[], float] = time.perf_counter) -> Timing:
    """Time `fn` called on `make_args()` (a dict of keyword arguments, or a tuple of positional
    ones; made once, reused by every call). `reps` fixes the number of timed calls, otherwise
    enough to fill `min_time` seconds. `clock` is the CPU wall clock (replaceable in tests)."""
    given = {k: v for k, v in (("warmup", warmup), ("min_time", min_time)) if v is not None}
    settings = BenchSettings.for_device(device, l2_flush=l2_flush, cuda_graph=cuda_graph,
                                        queue_ahead=queue_ahead, **given)
    prepared = _Prepared(fn, make_args, device, settings, clock)
    n = reps if reps is not None else prepared.reps_for(settings.min_time)
    return Timing.from_samples(prepared.samples(n), prepared.label)


class TimedCallError(RuntimeError):
    """A timed function raised; `name` says which. On a GPU, errors are asynchronous: a fault
    may surface in the next function's call or sync."""

    def __init__(self, name: str, exc: BaseException):
        super().__init__(f"{name} raised {error_line(exc)}")
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


# Error messages --------------------------------------------------------------------------
def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def error_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message."""
    return f"{type(exc).__name__}: {_first_line(exc)}"

