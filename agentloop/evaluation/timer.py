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

from pydantic import BaseModel, Field

from gates.runner.timing import (  # noqa: F401 - the measurement loop, re-exported for the judge
    MAX_HEAD_START_MS,
    Measure,
    Prepared,
    bind,
    capture_graph,
    first_line,
    head_start_ms,
    hold_stream,
    is_cuda,
    sync,
)

Clock = Literal["cuda_event", "cuda_graph", "perf_counter"]


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

    def measure(self) -> Measure:
        """The part of these settings the measurement loop needs (it runs in the runner too)."""
        return Measure(warmup=self.warmup, warmup_time=self.warmup_time, l2_flush=self.l2_flush,
                       cuda_graph=self.cuda_graph, queue_ahead=self.queue_ahead, chunk=self.chunk)

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
def _prepare(fn: Callable, make_args: Callable[[], Any], device: str, settings: BenchSettings,
             clock: Callable[[], float]) -> Prepared:
    return Prepared(bind(fn, make_args()), device, settings.measure(), clock)


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
    prepared = _prepare(fn, make_args, device, settings, clock)
    n = reps if reps is not None else prepared.reps_for(settings.min_time, settings.min_reps,
                                                        settings.max_reps)
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
    `settings.rounds` rounds; every function's samples from all rounds make its Timing.

    A function with a `prepare(args, settings)` method is timed elsewhere (a candidate in its
    runner, `agentloop.evaluation.benchmark.RemoteCandidate`): what `prepare` returns stands in for the
    local measurement loop."""
    settings = settings or BenchSettings.for_device(device)
    prepared: dict[str, Prepared] = {}
    per_round: dict[str, int] = {}
    rounds = max(1, settings.rounds)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    name = ""
    try:
        for name, fn in fns.items():
            prepared[name] = fn.prepare(make_args(), settings) if hasattr(fn, "prepare") else \
                _prepare(fn, make_args, device, settings, clock)
            wanted = reps if reps is not None else prepared[name].reps_for(
                settings.min_time, settings.min_reps, settings.max_reps)
            per_round[name] = math.ceil(wanted / rounds)
        for r in range(rounds):
            for name in round_order(list(fns), r):
                samples[name] += prepared[name].samples(per_round[name])
    except Exception as exc:
        raise TimedCallError(name, exc) from exc
    return {name: Timing.from_samples(s, prepared[name].label) for name, s in samples.items()}


# Error messages --------------------------------------------------------------------------
def error_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message (or its own one-line account)."""
    described = getattr(exc, "described", None)
    if isinstance(described, str):
        return described
    return f"{type(exc).__name__}: {first_line(exc)}"

