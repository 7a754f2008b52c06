"""The measurement loop: how one function is warmed up and timed, call by call.

It lives on the runner side because a candidate can only be timed in the process that holds
it; the judge times the reference with the very same loop in its own process, and keeps the
statistics (`agentloop.evaluation.timer`). On a GPU each timed call is bracketed by CUDA events after an
L2 flush, optionally replayed from a CUDA graph, and chunks of calls are queued behind a spin
kernel so the events see device time; on a CPU the wall clock times each call.

`Prepared(keep=True)` retains the outputs of the last chunk of timed calls, so the judge can
ask for any one of them afterwards (it picks which only once the chunk is done).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

FLUSH_BYTES_GPU = 256 * 2**20
FLUSH_BYTES_CPU = 32 * 2**20
"""Bigger than a CPU core's private caches; a large shared L3 may keep part of the inputs."""
MAX_HEAD_START_MS = 20.0
"""A chunk's hold never exceeds this: a function that syncs with the host inside its call makes
the host wait for the hold, and its measured enqueue time must not grow the next hold forever."""


@dataclass(frozen=True)
class Measure:
    """How one function is measured (the judge's `BenchSettings` fills it in)."""

    warmup: int = 5
    warmup_time: float = 0.025
    l2_flush: bool = True
    cuda_graph: bool = False
    queue_ahead: bool = True
    chunk: int = 50


def is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def sync(device: str) -> None:
    if is_cuda(device):
        torch.cuda.synchronize(torch.device(device))


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


def bind(fn: Callable, args: Any) -> Callable[[], Any]:
    if isinstance(args, Mapping):
        return lambda: fn(**args)
    if isinstance(args, tuple | list):
        return lambda: fn(*args)
    return lambda: fn(args)


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


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def capture_graph(call: Callable[[], Any], device: str) -> Callable[[], Any]:
    """A CUDA graph of one call; replaying it re-runs the same kernels on the same buffers and
    returns what the captured call returned (the graph's static outputs)."""
    side = torch.cuda.Stream(device=torch.device(device))
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # torch asks for a warm-up on a side stream before capture
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = call()
    except Exception as exc:  # e.g. a host sync (.item(), .cpu()) inside the function
        raise RuntimeError(f"CUDA-graph capture failed: {type(exc).__name__}: {first_line(exc)}") from None
    sync(device)

    def replay() -> Any:
        graph.replay()
        return out

    return replay


class Prepared:
    """One function bound to its inputs, warmed up, and ready to time."""

    def __init__(self, call: Callable[[], Any], device: str, settings: Measure,
                 clock: Callable[[], float] = time.perf_counter, keep: bool = False,
                 between: Callable[[], None] | None = None, probe: Callable[[Any], Any] | None = None):
        self.device, self.settings, self.clock, self.keep = device, settings, clock, keep
        self.between = between or (lambda: None)
        """Run before each timed call, outside its timing (the runner marks the inputs as
        written, so a result cached for unchanged inputs cannot answer a timed call)."""
        self.probe = probe
        """With `keep`, run on each timed call's result right after its timing ends (on the GPU,
        enqueued on the timed stream): a sample of the output as it stood when the call ended."""
        self.probes: list[Any] = []
        self.cuda = is_cuda(device)
        self.flush = _flush_buffer(device) if settings.l2_flush else None
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
        self.kept: list[Any] = []
        """The outputs of the last chunk of timed calls (keep=True)."""
        self.host_ms: float | None = None
        """Host time to enqueue one timed call, measured in the last chunk (GPU)."""
        self.label = ("cuda_graph" if settings.cuda_graph else "cuda_event") if self.cuda else "perf_counter"

    def reps_for(self, seconds: float, min_reps: int, max_reps: int) -> int:
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
        return max(min_reps, min(max_reps, math.ceil(seconds / per_call)))

    def samples(self, reps: int) -> list[float]:
        """Milliseconds of `reps` timed calls, each after an L2 flush (when enabled)."""
        out: list[float] = []
        self.kept, self.probes = [], []
        if self.cuda:
            for done in range(0, reps, max(1, self.settings.chunk)):
                out += self._gpu_chunk(min(self.settings.chunk, reps - done))
            return out
        for _ in range(reps):
            if self.flush is not None:
                self.flush.zero_()
            self.between()
            t0 = self.clock()
            result = self.call()
            out.append((self.clock() - t0) * 1e3)
            if self.keep:
                self.kept.append(result)
                if self.probe is not None:
                    self.probes.append(self.probe(result))
        return out

    def _gpu_chunk(self, n: int) -> list[float]:
        """`n` timed calls enqueued behind a hold (`queue_ahead`), then one sync."""
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        kept: list[Any] = []
        probes: list[Any] = []
        sync(self.device)
        if self.settings.queue_ahead:
            hold_stream(self.device, head_start_ms(self.host_ms or 0.0, n))
        enqueue = time.perf_counter()
        for start, end in zip(starts, ends, strict=True):
            if self.flush is not None:
                self.flush.zero_()
            self.between()
            start.record()
            result = self.call()
            end.record()
            if self.keep:
                kept.append(result)
                if self.probe is not None:
                    probes.append(self.probe(result))
        self.host_ms = (time.perf_counter() - enqueue) * 1e3 / n
        sync(self.device)
        self.kept, self.probes = kept, probes
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
