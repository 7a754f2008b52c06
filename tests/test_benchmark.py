"""The CPU timing path: statistics, interleaving, speedups, the re-check on fresh inputs, and the
result models' safe defaults."""

import importlib.util
import time

import numpy as np
import pytest

from agentloop.evaluation import benchmark
from agentloop.evaluation.benchmark import (
    CPU_BATCH_CAP,
    BenchmarkResult,
    ShapeTiming,
    bench_dims,
    benchmark_candidate,
    geomean,
)
from agentloop.evaluation.timer import (
    MAX_HEAD_START_MS,
    BenchSettings,
    Timing,
    head_start_ms,
    quantiles,
    round_order,
    time_callable,
    time_interleaved,
)
from gates.contract import get_task
from gates.correctness import compare_outputs
from gates.reference import make_inputs, reference_fn

TASK = get_task("rms_norm")
REF = reference_fn(TASK)
FAST = BenchSettings.for_device("cpu", min_time=0.005, l2_flush=False)


class FakeClock:
    """A clock that only moves when a timed function says it took some time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, ms):
        self.now += ms / 1e3


def test_statistics_on_a_fake_clock_and_warmup_not_counted():
    clock = FakeClock()
    durations = iter([100.0, 100.0, 5.0, 1.0, 3.0, 2.0, 4.0])
    timing = time_callable(lambda: clock.advance(next(durations)), tuple, "cpu", warmup=2, reps=5,
                           l2_flush=False, clock=clock)
    assert timing.n == 5 and timing.clock == "perf_counter"
    assert timing.median_ms == pytest.approx(3.0)
    assert (timing.q25_ms, timing.q75_ms) == (pytest.approx(2.0), pytest.approx(4.0))
    assert timing.iqr_ms == pytest.approx(2.0)
    assert timing.mean_ms == pytest.approx(3.0) and timing.min_ms == pytest.approx(1.0)
    assert timing.samples_ms == pytest.approx([5.0, 1.0, 3.0, 2.0, 4.0])


def test_sleeping_callable_measured_by_the_wall_clock_with_flush():
    timing = time_callable(time.sleep, lambda: (0.002,), "cpu", warmup=1, reps=5)
    assert timing.n == 5
    assert 2.0 <= timing.median_ms < 50.0
    assert timing.q25_ms <= timing.median_ms <= timing.q75_ms


def test_repetitions_follow_min_time():
    calls = []
    timing = time_callable(lambda: (calls.append(1), time.sleep(0.001)), tuple, "cpu", warmup=0,
                           min_time=0.03, l2_flush=False)
    # about 30 calls of ~1 ms fill 0.03 s; sleep overshoot makes it fewer, never more
    assert 3 <= timing.n <= 31
    assert len(calls) == timing.n + 3  # plus the three calls that estimate the cost


def test_keyword_arguments_are_passed():
    seen = {}
    time_callable(lambda a, b: seen.update(a=a, b=b), lambda: {"a": 1, "b": 2}, "cpu", warmup=0, reps=1,
                  l2_flush=False)
    assert seen == {"a": 1, "b": 2}


def test_cuda_graph_needs_a_gpu():
    with pytest.raises(ValueError, match="CUDA device"):
        time_callable(lambda: None, tuple, "cpu", warmup=0, reps=1, cuda_graph=True)


def test_queue_ahead_hold_covers_the_enqueue_time_and_is_capped():
    # 50 calls that take the host 0.03 ms each to enqueue: held 1.5x as long, plus a margin
    assert head_start_ms(0.03, 50) == pytest.approx(1.5 * 50 * 0.03 + 0.2)
    assert head_start_ms(0.06, 50) > head_start_ms(0.03, 50) > head_start_ms(0.03, 10)
    # a call that syncs inside makes the host wait for the hold itself: the next hold is capped
    assert head_start_ms(5.0, 50) == MAX_HEAD_START_MS
    assert head_start_ms(-1.0, 50) == pytest.approx(0.2)
    assert BenchSettings.for_device("cpu").queue_ahead  # ignored off a GPU: the CPU path has no stream


def test_quantiles_match_numpy_and_geomean():
    xs = list(np.random.default_rng(0).exponential(size=37))
    assert quantiles(xs, (0.1, 0.25, 0.5, 0.75, 0.9)) == pytest.approx(
        list(np.percentile(xs, [10, 25, 50, 75, 90])))
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean([2.0, 8.0, 4.0]) == pytest.approx(4.0)
    assert geomean([]) == -1.0 and geomean([2.0, -1.0]) == -1.0


def test_rounds_alternate_forward_and_backward():
    assert [round_order(["a", "b"], r) for r in range(4)] == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
    log = []
    fns = {"cand": lambda: log.append("C"), "ref": lambda: log.append("R")}
    settings = BenchSettings.for_device("cpu", warmup=0, rounds=4, l2_flush=False)
    timings = time_interleaved(fns, tuple, "cpu", settings, reps=8)  # 2 per round
    assert "".join(log) == "CC" "RR" "RR" "CC" "CC" "RR" "RR" "CC"
    assert timings["cand"].n == timings["ref"].n == 8


def test_interleaving_cancels_a_linear_drift():
    """Two identical functions on a clock that slows down call after call: interleaved, they time
    alike; timed one after the other, the second looks slower."""
    clock = FakeClock()
    calls = [0]

    def drifting():
        calls[0] += 1
        clock.advance(1.0 + 0.01 * calls[0])

    settings = BenchSettings.for_device("cpu", warmup=0, rounds=4, l2_flush=False)
    inter = time_interleaved({"a": drifting, "b": lambda: drifting()}, tuple, "cpu", settings, reps=40,
                             clock=clock)
    assert inter["a"].median_ms == pytest.approx(inter["b"].median_ms, rel=1e-9)
    assert inter["a"].mean_ms == pytest.approx(inter["b"].mean_ms, rel=1e-9)
    first = time_callable(drifting, tuple, "cpu", warmup=0, reps=40, l2_flush=False, clock=clock)
    second = time_callable(drifting, tuple, "cpu", warmup=0, reps=40, l2_flush=False, clock=clock)
    assert second.median_ms > first.median_ms * 1.1


def test_result_models_default_to_unmeasured():
    result = BenchmarkResult(task="rms_norm", dtype="float32", device="cpu")
    assert result.speedup == -1.0 and result.correct is False and result.shapes == []
    assert result.compiled_speedup is None and result.error is None
    timing = Timing()
    assert timing.median_ms == -1.0 and timing.n == 0 and timing.iqr_ms == -1.0
    assert ShapeTiming(dims={"T": 1}).speedup == -1.0
    dumped = Timing.from_samples([1.0, 2.0], "perf_counter").model_dump()
    assert "samples_ms" not in dumped and dumped["n"] == 2


def test_cpu_bench_shapes_are_capped_and_distinct():
    dims = bench_dims(TASK, "cpu")
    assert dims and len(dims) == len({tuple(sorted(d.items())) for d in dims})
    for d in dims:
        assert d[TASK.batch_axis] <= CPU_BATCH_CAP
        assert all(d[a] <= TASK.cpu_dims[a] for a in TASK.cpu_dims)
    assert bench_dims(TASK, "cuda") == [TASK.dims_for("cuda", s) for s in TASK.bench_shapes]
    assert bench_dims(TASK, "cpu", [{"T": 100}]) == [{**TASK.cpu_dims, "T": 100}]


def test_plain_torch_candidate_speedup_is_the_ratio_of_medians():
    result = benchmark_candidate(lambda x, weight, eps: REF(x, weight, eps), REF, TASK, "cpu",
                                 dtype="float32", settings=FAST)
    assert result.correct and result.error is None
    assert [s.dims for s in result.shapes] == bench_dims(TASK, "cpu")
    for s in result.shapes:
        assert s.candidate.n >= FAST.min_reps and s.reference.n >= FAST.min_reps
        assert s.speedup == pytest.approx(s.reference.median_ms / s.candidate.median_ms)
    assert result.speedup == pytest.approx(geomean([s.speedup for s in result.shapes]))
    assert result.clock == "perf_counter" and result.seconds > 0


def test_triton_candidate_through_the_interpreter():
    path = TASK.candidates_dir / "row_per_program.py"
    spec = importlib.util.spec_from_file_location("bench_row_per_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = benchmark_candidate(module.rms_norm, REF, TASK, "cpu", shapes=[{"T": 2}], settings=FAST)
    assert result.correct, result.error
    assert result.speedup > 0 and result.shapes[0].candidate.median_ms > 0


def test_recheck_catches_a_candidate_right_only_on_its_first_inputs():
    cache = {}

    def caching(x, weight, eps):  # the first result per shape, returned forever after
        return cache.setdefault(tuple(x.shape), REF(x, weight, eps))

    gated = make_inputs(TASK, {"T": 4, "H": 256}, "float32", 0, "cpu")
    assert compare_outputs(TASK, "float32", (caching(**gated),), (REF(**gated),)) is None
    cache.clear()
    result = benchmark_candidate(caching, REF, TASK, "cpu", shapes=[{"T": 4}], dtype="float32",
                                 settings=FAST)
    assert not result.correct and result.speedup == -1.0
    assert "fresh inputs" in result.error and "'T': 4" in result.error
    assert result.shapes and result.shapes[0].speedup > 0  # it was timed before it was caught


def test_a_candidate_that_raises_is_reported_not_raised():
    def broken(x, weight, eps):
        raise ValueError("block size too large\nsecond line")

    result = benchmark_candidate(broken, REF, TASK, "cpu", shapes=[{"T": 2}], settings=FAST)
    assert result.error == "candidate raised ValueError: block size too large"
    assert not result.correct and result.speedup == -1.0


def test_torch_compile_baseline_skipped_gracefully(monkeypatch):
    def no_toolchain(fn, **kwargs):
        def compiled(*args, **kw):
            raise RuntimeError("no C++ compiler found")
        return compiled

    monkeypatch.setattr(benchmark.torch, "compile", no_toolchain)
    result = benchmark_candidate(lambda x, weight, eps: REF(x, weight, eps), REF, TASK, "cpu",
                                 shapes=[{"T": 2}], compile_reference=True, settings=FAST)
    assert result.correct and result.speedup > 0
    assert result.compiled_speedup is None and result.shapes[0].compiled_reference is None
    assert result.compiled_error == "torch.compile baseline skipped: RuntimeError: no C++ compiler found"


def test_torch_compile_baseline_is_timed_when_it_works(monkeypatch):
    # A stand-in for torch.compile (the real one takes ~20 s on two cores): the reference itself.
    monkeypatch.setattr(benchmark.torch, "compile", lambda fn, **kwargs: lambda *a, **k: fn(*a, **k))
    result = benchmark_candidate(lambda x, weight, eps: REF(x, weight, eps), REF, TASK, "cpu",
                                 shapes=[{"T": 2}, {"T": 3}], compile_reference=True, settings=FAST)
    assert result.compiled_error is None
    for s in result.shapes:
        assert s.compiled_reference.n >= FAST.min_reps
        assert s.compiled_speedup == pytest.approx(s.compiled_reference.median_ms / s.candidate.median_ms)
    assert result.compiled_speedup == pytest.approx(geomean([s.compiled_speedup for s in result.shapes]))
