"""Production baselines: every task declares at least one, each matches its reference on the CPU,
and the benchmark times them beside the candidate (speedups per shape and overall), leaving out a
baseline that cannot run instead of failing the candidate."""

import sys
from pathlib import Path

import pytest
import torch

from agentloop.evaluation import benchmark
from agentloop.evaluation.benchmark import benchmark_candidate, geomean, timed_baselines
from agentloop.evaluation.timer import BenchSettings
from gates.contract import Baseline, TaskError, get_task, load_suite, load_task
from gates.correctness import compare_outputs
from gates.reference import as_outputs, baseline_fn, make_inputs, reference_fn

SUITE = load_suite()
FAST = BenchSettings.for_device("cpu", min_time=0.005, l2_flush=False)
CASES = [(t.name, b.name) for t in SUITE.values() for b in t.baselines]


def test_every_task_declares_an_eager_production_baseline_and_a_compiled_reference():
    for task in SUITE.values():
        eager = [b for b in task.baselines if not b.compile]
        assert eager, f"{task.name} declares no production baseline that runs without torch.compile"
        assert any(b.source == "reference" and b.compile for b in task.baselines), task.name


@pytest.mark.parametrize(("task_name", "name"), CASES)
def test_each_baseline_matches_the_reference_on_the_cpu(task_name, name):
    # compile: true baselines are checked uncompiled here (torch.compile takes ~20 s a shape on
    # two cores); the benchmark checks the compiled function's first call at every shape.
    task = SUITE[task_name]
    baseline = next(b for b in task.baselines if b.name == name)
    fn = baseline_fn(task, baseline)
    for dtype in task.dtypes:
        for dims in task.shapes_for("cpu")[:1] + task.shapes_for("cpu")[-1:]:
            inputs = make_inputs(task, dims, dtype, 1, "cpu")
            want = as_outputs(reference_fn(task)(**{k: v.clone() if isinstance(v, torch.Tensor) else v
                                                    for k, v in inputs.items()}))
            problem = compare_outputs(task, dtype, as_outputs(fn(**inputs)), want)
            assert problem is None, f"{task_name}/{name} {dtype} {dims}: {problem}"


def test_a_missing_baseline_function_is_a_one_line_task_error(tmp_path):
    source = get_task("rms_norm")
    (tmp_path / "rms_norm").mkdir()
    (tmp_path / "rms_norm" / "reference.py").write_text(source.reference_path.read_text())
    (tmp_path / "rms_norm" / "baselines.py").write_text("def other(x, weight, eps):\n    return x\n")
    text = source.path.read_text()
    (tmp_path / "rms_norm.yaml").write_text(text)
    with pytest.raises(TaskError, match="does not define function 'torch_rms_norm'"):
        load_task(tmp_path / "rms_norm.yaml")


def test_the_benchmark_times_each_baseline_and_the_fastest_per_shape():
    task = SUITE["rms_norm"]
    ref = reference_fn(task)
    result = benchmark_candidate(lambda x, weight, eps: ref(x, weight, eps), ref, task, "cpu",
                                 shapes=[{"T": 2}, {"T": 4}], settings=FAST)
    assert result.correct and result.baselines_unavailable == {}
    assert [b.name for b in timed_baselines(task, False)] == ["torch_rms_norm"]
    for s in result.shapes:
        assert set(s.baselines) == {"torch_rms_norm"} and s.baselines["torch_rms_norm"].n >= FAST.min_reps
        assert s.fastest_baseline == "torch_rms_norm"
        assert s.baseline_speedups["torch_rms_norm"] == pytest.approx(
            s.baselines["torch_rms_norm"].median_ms / s.candidate.median_ms)
        assert s.production_speedup == s.baseline_speedups["torch_rms_norm"]
        assert s.compiled_reference is None  # compiled baselines only with compile_reference
    assert result.baseline_speedups["torch_rms_norm"] == pytest.approx(
        geomean([s.baseline_speedups["torch_rms_norm"] for s in result.shapes]))
    assert result.production_speedup == pytest.approx(geomean([s.production_speedup for s in result.shapes]))
    assert result.speedup == pytest.approx(geomean([s.speedup for s in result.shapes]))


def test_the_fastest_baseline_is_picked_per_shape(monkeypatch):
    task = SUITE["rms_norm"]
    ref = reference_fn(task)
    slow = Baseline(name="slow", summary="slept", source="reference")
    fast = Baseline(name="fast", summary="eager", source="baselines")
    real = benchmark.baseline_fn

    def stand_in(task, b):
        if b.name == "slow":
            import time
            return lambda **kw: (time.sleep(0.003), ref(**kw))[1]
        return real(task, b.model_copy(update={"name": "torch_rms_norm"}))

    monkeypatch.setattr(benchmark, "baseline_fn", stand_in)
    result = benchmark_candidate(ref, ref, task, "cpu", shapes=[{"T": 2}], settings=FAST,
                                 baselines=[slow, fast])
    s = result.shapes[0]
    assert s.fastest_baseline == "fast"
    assert s.baselines["slow"].median_ms > s.baselines["fast"].median_ms
    assert s.production_speedup == s.baseline_speedups["fast"] < s.baseline_speedups["slow"]


def test_a_baseline_that_raises_or_is_wrong_is_unavailable_not_fatal(monkeypatch):
    task = SUITE["rms_norm"]
    ref = reference_fn(task)
    raising = Baseline(name="raising", summary="no such op here")
    wrong = Baseline(name="wrong", summary="returns zeros")

    def stand_in(task, b):
        if b.name == "raising":
            def fn(**kw):
                raise NotImplementedError("aten::frobnicate is not implemented for this device")
            return fn
        return lambda x, weight, eps: torch.zeros_like(x)

    monkeypatch.setattr(benchmark, "baseline_fn", stand_in)
    result = benchmark_candidate(ref, ref, task, "cpu", shapes=[{"T": 2}], settings=FAST,
                                 baselines=[raising, wrong])
    assert result.correct and result.speedup > 0 and result.error is None
    assert result.baselines_unavailable["raising"] == \
        "NotImplementedError: aten::frobnicate is not implemented for this device"
    assert result.baselines_unavailable["wrong"].startswith("wrong output at {")
    assert result.shapes[0].baselines == {} and result.production_speedup is None
    assert result.baseline_speedups == {}


def test_compile_reference_times_the_declared_compiled_baseline_under_the_old_keys(monkeypatch):
    monkeypatch.setattr(benchmark.torch, "compile", lambda fn, **kwargs: lambda *a, **k: fn(*a, **k))
    task = SUITE["linear"]
    ref = reference_fn(task)
    result = benchmark_candidate(lambda x, weight, bias: ref(x, weight, bias), ref, task, "cpu",
                                 shapes=[{"T": 2}], compile_reference=True, settings=FAST)
    s = result.shapes[0]
    assert set(s.baselines) == {"torch_linear", "compiled_reference"}
    assert s.compiled_reference == s.baselines["compiled_reference"]
    assert result.compiled_speedup == pytest.approx(s.baseline_speedups["compiled_reference"])


def test_a_wrong_candidate_gets_no_production_speedup():
    task = SUITE["rms_norm"]
    ref = reference_fn(task)
    calls = []

    def caching(x, weight, eps):  # right on the timed inputs, wrong on fresh ones
        if not calls:
            calls.append(ref(x, weight, eps))
        return calls[0]

    result = benchmark_candidate(caching, ref, task, "cpu", shapes=[{"T": 2}], settings=FAST)
    assert not result.correct and result.production_speedup is None and result.baseline_speedups == {}


def test_feedback_says_where_the_kernel_stands_against_the_production_baseline(tmp_path):
    from loop_fakes import loop_context

    from agentloop.evaluation.benchmark import BenchmarkResult, ShapeTiming
    from agentloop.evaluation.stages import StageOutcome
    from agentloop.evaluation.timer import Timing
    from agentloop.loop.nodes import feedback
    from agentloop.loop.state import Candidate, LoopState

    def shape(t, cand, ref, base):
        return ShapeTiming(dims={"T": t, "H": 256}, candidate=Timing(median_ms=cand, n=3),
                           reference=Timing(median_ms=ref, n=3), speedup=ref / cand,
                           baselines={"torch_rms_norm": Timing(median_ms=base, n=3)},
                           baseline_speedups={"torch_rms_norm": base / cand},
                           fastest_baseline="torch_rms_norm", production_speedup=base / cand)

    bench = BenchmarkResult(task="rms_norm", dtype="bfloat16", device="cpu", correct=True,
                            shapes=[shape(1, 0.010, 0.040, 0.008), shape(8, 0.020, 0.060, 0.010)],
                            speedup=(4.0 * 3.0) ** 0.5, production_speedup=(0.8 * 0.5) ** 0.5)
    c = Candidate(number=1, round=1, seed=0, answer="", code="x", status="accepted",
                  stages={"benchmark": StageOutcome(stage="benchmark", passed=True, benchmark=bench)})
    for mode in ("baseline", "bi-aware"):
        ctx = loop_context(tmp_path / mode, mode=mode)
        text = feedback(c, LoopState(task="rms_norm", candidates=[c]), ctx)
        assert "Speedup over the reference: 3.46x" in text
        assert ("Against the fastest production baseline (what a serving engine runs today instead of a "
                "custom kernel): 0.632x") in text
        assert ("T=1 H=256: `torch_rms_norm` 8 us, yours 10 us; "
                "T=8 H=256: `torch_rms_norm` 10 us, yours 20 us") in text
    # Without a timed baseline, nothing is said about one.
    bench.production_speedup = None
    assert "production baseline" not in feedback(c, LoopState(task="rms_norm", candidates=[c]), ctx)


@pytest.mark.parametrize("production", [True, False])
def test_a_campaign_can_leave_the_production_baselines_out(production):
    """`eval: {production_baselines: false}` reaches the benchmark stage: only candidate and
    reference are timed (the campaign-time comparisons with runs from before baselines existed)."""
    from agentloop.campaign.file import parse_campaign
    from agentloop.evaluation import jobs as worker_jobs

    campaign = parse_campaign({"name": "t", "tasks": ["rms_norm"],
                               "eval": {"production_baselines": production}})
    assert campaign.eval_settings().production_baselines is production
    code = (Path(__file__).parent / "fixtures" / "pool" / "rms_norm_torch.py").read_text()
    result = worker_jobs.benchmark_job(code, SUITE["rms_norm"], "cpu",
                                       production_baselines=campaign.eval_settings().production_baselines)
    assert result.correct, result.error
    assert all(bool(s.baselines) is production for s in result.shapes)
    assert (result.production_speedup is not None) is production


def test_trusted_modules_are_importable_by_their_names():
    """torch.compile imports a traced function's module by its `__name__` (dynamo does, for the
    globals of an inlined call): a reference or baseline loaded from its file must be found there."""
    import importlib

    for task in SUITE.values():
        for fn in [reference_fn(task), *(baseline_fn(task, b) for b in task.baselines)]:
            assert importlib.import_module(fn.__module__) is sys.modules[fn.__module__], task.name
            assert getattr(sys.modules[fn.__module__], fn.__name__) is fn, task.name
