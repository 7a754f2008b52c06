"""The worker pool on a CPU: every stage through sandboxed workers, the result models, per-stage
timeouts, hangs, crashes and memory exhaustion reported precisely while the pool keeps going,
and several threads sharing the pool. Fixtures are real candidate files (tests/fixtures/pool)."""

import threading
import time
from pathlib import Path

import pytest

from agentloop.evaluation.benchmark import BenchmarkResult
from agentloop.evaluation.pool import WorkerPool, stage_outcome
from agentloop.evaluation.stages import STAGES, EvalSettings, StageOutcome, code_hash
from gates.contract import get_task
from gates.judge.sandbox import Job, JobResult, WorkerLimits
from gates.verdict import GateResult

TASK = get_task("rms_norm")
FIXTURES = Path(__file__).parent / "fixtures" / "pool"
SETTINGS = EvalSettings(stage_timeout_s={"compile": 60, "dynamic": 120, "correctness": 120, "benchmark": 120})


def code(name: str) -> str:
    return (FIXTURES / f"{name}.py").read_text()


@pytest.fixture(scope="module")
def pool():
    with WorkerPool("cpu", workers=2) as p:
        p.warm_up()
        yield p


def test_a_correct_invariant_kernel_passes_every_stage(pool):
    outcomes = pool.evaluate(code("rms_norm_rows"), TASK, SETTINGS)
    assert [o.stage for o in outcomes] == list(STAGES)
    assert all(o.passed and o.error is None for o in outcomes), [o.error for o in outcomes]
    assert [o.gate.gate for o in outcomes[:4]] == ["compile", "static", "dynamic", "correctness"]
    assert all(o.seconds >= o.gate.seconds for o in outcomes[:4] if o.stage != "static")
    bench = outcomes[-1].benchmark
    # The CPU timing path, through a worker: wall clock, both functions timed at every capped shape.
    assert isinstance(bench, BenchmarkResult) and bench.correct and bench.clock == "perf_counter"
    assert bench.device == "cpu" and bench.speedup > 0
    assert [s.dims for s in bench.shapes] == [{"H": 256, "T": 1}, {"H": 256, "T": 8}]
    for shape in bench.shapes:
        assert shape.candidate.n > 0 and shape.reference.n > 0 and shape.speedup > 0
    last = outcomes[-1]
    assert StageOutcome.model_validate_json(last.model_dump_json()).model_dump() == last.model_dump()


def test_evaluation_stops_at_the_first_failed_stage(pool):
    stages = ("compile", "dynamic", "correctness", "benchmark")
    outcomes = pool.evaluate(code("off_by_scale"), TASK, SETTINGS, stages=stages)
    assert [(o.stage, o.passed) for o in outcomes] == [("compile", True), ("dynamic", True),
                                                       ("correctness", False)]
    assert any(f.rule == "CR005" and "output out" in f.message for f in outcomes[-1].gate.findings)


def test_bi_stages_reject_or_only_observe(pool):
    stages = ("compile", "dynamic", "correctness", "benchmark")
    rejected = pool.evaluate(code("batch_path"), TASK, SETTINGS, stages=stages)
    assert [(o.stage, o.passed) for o in rejected] == [("compile", True), ("dynamic", False)]
    example = rejected[-1].gate.counterexample
    assert example is not None and example.batch_size > 1 and example.mismatched_elements > 0
    observed = pool.evaluate(code("batch_path"), TASK, SETTINGS, stages=stages, observe_bi=True)
    assert [(o.stage, o.passed) for o in observed] == [("compile", True), ("dynamic", False),
                                                       ("correctness", True), ("benchmark", True)]
    # Observing covers the BI stages only: a wrong kernel still stops at correctness.
    wrong = pool.evaluate(code("off_by_scale"), TASK, SETTINGS, stages=stages, observe_bi=True)
    assert [o.stage for o in wrong][-1] == "correctness"


def test_static_stage_runs_in_the_caller_on_source_only(pool):
    outcome = pool.evaluate_stage(code("segfault"), TASK, "static", SETTINGS)
    assert outcome.stage == "static" and outcome.gate.gate == "static"
    outcome = pool.evaluate_stage("def broken(:\n", TASK, "static", SETTINGS)
    assert not outcome.passed and "syntax error" in outcome.error


@pytest.mark.parametrize(("fixture", "expected"), [
    ("no_entry", "candidate.py: no entry function 'rms_norm'"),
    ("bad_arange", "first call at bfloat16 H=256 T=1 raised InterpreterError"),
    ("opens_socket", "Refused: network access is disabled in evaluations (socket.getaddrinfo) "
                     "(at candidate.py line 9)"),
])
def test_compile_stage_reports_why_a_candidate_cannot_run(pool, fixture, expected):
    outcome = pool.evaluate_stage(code(fixture), TASK, "compile", SETTINGS)
    assert not outcome.passed and outcome.gate.gate == "compile"
    assert expected in outcome.error and outcome.error == outcome.gate.error
    if fixture == "bad_arange":
        assert "power of 2" in outcome.error and "candidate.py line 16" in outcome.error


def test_a_stage_timeout_stops_the_candidate_and_the_pool_goes_on(pool):
    settings = SETTINGS.model_copy(update={"stage_timeout_s": {**SETTINGS.stage_timeout_s, "dynamic": 4}})
    before = pool.restarts
    stages = ("compile", "dynamic", "correctness")
    outcomes = pool.evaluate(code("hang_large_batch"), TASK, settings, stages=stages)
    assert [(o.stage, o.passed) for o in outcomes] == [("compile", True), ("dynamic", False)]
    assert outcomes[-1].error.startswith("timed out after 4 s; in batch")
    assert outcomes[-1].gate.error == outcomes[-1].error
    assert pool.restarts == before  # the judge stopped the candidate's runner and lives on
    assert pool.evaluate_stage(code("rms_norm_rows"), TASK, "compile", settings).passed


def test_hang_crash_and_memory_exhaustion_are_reported_and_the_pool_carries_on():
    settings = SETTINGS.model_copy(update={"stage_timeout_s": {"compile": 5}})  # other stages: defaults
    good = code("rms_norm_torch")
    with WorkerPool("cpu", workers=1, limits=WorkerLimits(memory_bytes=384 * 2**20)) as pool:
        (first_pid,) = pool.warm_up()
        assert pool.evaluate_stage(good, TASK, "compile", settings).passed

        hang = pool.evaluate_stage(code("hang"), TASK, "compile", settings)
        assert not hang.passed and hang.error == "first call at bfloat16 H=256 T=1 raised timed out after 5 s"
        assert pool.evaluate_stage(good, TASK, "compile", settings).passed

        crash = pool.evaluate_stage(code("segfault"), TASK, "compile", settings)
        assert not crash.passed
        assert crash.error == ("first call at bfloat16 H=256 T=1 raised the candidate's process died: "
                               "SIGSEGV (segmentation fault (a stack overflow or a bad memory access)) at "
                               "candidate.py line 9")
        assert pool.evaluate_stage(good, TASK, "compile", settings).passed

        hog = pool.evaluate_stage(code("memory_hog"), TASK, "compile", settings)
        assert not hog.passed
        assert hog.error.startswith("out of memory: first call at bfloat16 H=256 T=1 raised ")
        assert "can't allocate memory" in hog.error and "(at candidate.py line 9)" in hog.error
        outcomes = pool.evaluate(good, TASK, settings, stages=("compile", "correctness"))
        assert [(o.stage, o.passed) for o in outcomes] == [("compile", True), ("correctness", True)]
        # The judge worker outlived every one of them: only the candidates' runners were stopped.
        assert pool.restarts == 0 and pool.pids() == [first_pid]


def test_several_threads_share_the_pool(tmp_path, monkeypatch):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    barrier.chmod(0o777)  # runners write there under uids of their own
    monkeypatch.setenv("AGENTLOOP_RUNNER_SHARED_DIR", str(barrier))
    # The variable must reach the workers: start a pool of its own after setting it.
    with WorkerPool("cpu", workers=2) as shared:
        assert len(set(shared.warm_up())) == 2
        # Each barrier candidate returns only once another worker has called one too, so they
        # pass only if two ran at the same time; the others are checked to come back to their caller.
        jobs = [code("barrier") + f"\n# variant {i}\n" for i in range(2)] + \
               [code("no_entry") + f"\n# variant {i}\n" for i in range(2)] + [code("rms_norm_torch")]
        results: dict[int, StageOutcome] = {}

        def run(i: int) -> None:
            results[i] = shared.evaluate_stage(jobs[i], TASK, "compile", SETTINGS)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [results[i].passed for i in range(len(jobs))] == [True, True, False, False, True], \
            [results[i].error for i in range(len(jobs))]
        assert all("no entry function" in results[i].error for i in (2, 3))
        assert len(list(barrier.iterdir())) == 2
    with pytest.raises(RuntimeError, match="the worker pool is closed"):
        shared.evaluate_stage(code("rms_norm_torch"), TASK, "compile", SETTINGS)


@pytest.mark.parametrize("exclusive", [True, False])
def test_a_benchmark_runs_alone_on_its_device_when_exclusive(tmp_path, monkeypatch, exclusive):
    """Two workers on one device: a dynamic stage asked for while the other worker benchmarks
    waits for the benchmark to end (exclusive) or runs beside it (not exclusive, the control
    that shows the check can see an overlap)."""
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    stamps.chmod(0o777)  # runners write there under uids of their own
    monkeypatch.setenv("AGENTLOOP_RUNNER_SHARED_DIR", str(stamps))
    with WorkerPool("cpu", workers=2, exclusive_benchmark=exclusive) as shared:
        shared.warm_up()
        bench = threading.Thread(target=shared.evaluate_stage,
                                 args=(code("stamped") + "\n# bench\n", TASK, "benchmark", SETTINGS))
        bench.start()
        deadline = time.monotonic() + 60
        while not any(stamps.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.005)
        [bench_file] = list(stamps.iterdir())  # the benchmark is under way; nothing else has run
        gate = shared.evaluate_stage(code("stamped") + "\n# gate\n", TASK, "dynamic", SETTINGS)
        bench.join()
    assert gate.error is None
    calls = {f.name: [tuple(map(float, line.split())) for line in f.read_text().splitlines()]
             for f in stamps.iterdir()}
    gate_calls = next(v for k, v in calls.items() if k != bench_file.name)
    first, last = calls[bench_file.name][0][0], calls[bench_file.name][-1][1]
    overlapping = [c for c in gate_calls if c[0] < last and c[1] > first]
    assert gate_calls and bool(overlapping) is not exclusive, (len(gate_calls), len(overlapping))


def test_workers_are_recycled_after_many_candidates():
    with WorkerPool("cpu", workers=1, recycle_after=1) as pool:
        assert pool.evaluate_stage(code("rms_norm_torch"), TASK, "compile", SETTINGS).passed
        assert pool.evaluate_stage(code("rms_norm_torch"), TASK, "correctness", SETTINGS).passed
        assert pool.restarts == 0  # the same candidate again
        assert pool.evaluate_stage(code("rms_norm_rows"), TASK, "compile", SETTINGS).passed
        assert pool.restarts == 1


def test_unusable_calls_are_one_line_errors(pool):
    with pytest.raises(ValueError, match="settings.device is cuda but this pool runs on cpu"):
        pool.evaluate_stage("", TASK, "compile", EvalSettings(device="cuda"))
    with pytest.raises(ValueError, match="unknown stage 'link'"):
        pool.evaluate("", TASK, SETTINGS, stages=("compile", "link"))
    with pytest.raises(ValueError, match="workers must be at least 1"):
        WorkerPool("cpu", workers=0)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        WorkerPool("tpu")


def test_stage_outcomes_from_job_results():
    killed = "worker crashed: SIGKILL (killed, possibly for running out of memory)"
    crashed = JobResult(status="crash", error=killed, restarted=True, seconds=1.0)
    outcome = stage_outcome("dynamic", crashed, 2.0)
    assert outcome == StageOutcome(stage="dynamic", passed=False, seconds=2.0, gate=outcome.gate,
                                   error=f"out of memory: {killed}; worker replaced")
    assert outcome.gate == GateResult(gate="dynamic", passed=False, seconds=2.0, error=outcome.error)
    wrong = BenchmarkResult(task="rms_norm", dtype="bfloat16", device="cpu", error="wrong on fresh inputs")
    outcome = stage_outcome("benchmark", JobResult(status="ok", value=wrong), 1.0)
    assert not outcome.passed and outcome.benchmark == wrong and outcome.gate is None
    assert outcome.error == "wrong on fresh inputs"
    silent = BenchmarkResult(task="rms_norm", dtype="bfloat16", device="cpu")  # safe defaults: not correct
    assert stage_outcome("benchmark", JobResult(status="ok", value=silent), 1.0).error == \
        "the re-check on fresh inputs did not pass"
    odd = stage_outcome("compile", JobResult(status="ok", value=3), 1.0)
    assert not odd.passed and odd.error == "the compile job returned int, not a result"


def test_a_result_returned_before_the_cuda_context_broke_still_fails():
    # What the sandbox returns when a job came back but left the CUDA context corrupted.
    fault = "AcceleratorError: CUDA error: an illegal memory access was encountered"
    gate = GateResult(gate="dynamic", passed=False, error=f"{fault}; in a batch of 64")
    fatal = JobResult(status="error", value=gate, error=f"CUDA context corrupted: {fault}", restarted=True)
    outcome = stage_outcome("dynamic", fatal, 1.0)
    assert not outcome.passed and outcome.gate.error == outcome.error
    assert outcome.error == f"{fault}; in a batch of 64; CUDA context corrupted, worker replaced"
    timed = BenchmarkResult(task="rms_norm", dtype="bfloat16", device="cuda", correct=True, speedup=1.5)
    fatal = JobResult(status="error", value=timed, error=f"CUDA context corrupted: {fault}", restarted=True)
    outcome = stage_outcome("benchmark", fatal, 1.0)
    assert not outcome.passed and outcome.error == f"CUDA context corrupted: {fault}; worker replaced"
    assert outcome.benchmark.speedup == -1.0 and not outcome.benchmark.correct


def test_a_stage_goes_to_the_worker_whose_runners_hold_the_candidate(pool):
    """Loaded once is not enough: the worker must still hold it (else its next stage starts a
    runner like any other worker would)."""
    first, second = pool._workers
    saved = [(w.loaded, w.held) for w in pool._workers]
    try:
        first.loaded, first.held = {"a", "c", "d"}, ["c", "d"]   # held a once, holds c and d now
        second.loaded, second.held = {"a", "e"}, ["e", "a"]
        pool._idle[:] = [first, second]
        with pool._worker("a") as worker:
            assert worker is second
        pool._idle[:] = [first, second]
        with pool._worker("b") as worker:  # nobody holds b: the first free one
            assert worker is first
    finally:
        for w, (loaded, held) in zip(pool._workers, saved, strict=True):
            w.loaded, w.held = loaded, held


def test_a_freed_worker_is_left_to_the_waiting_stage_whose_candidate_it_holds(pool):
    """A caller whose candidate nobody holds does not take the one free worker that holds
    another waiting caller's candidate (both would then start new runners); it takes the next
    worker that holds no waiting caller's candidate."""
    first, second = pool._workers
    saved = [w.held for w in pool._workers]
    got: list = []

    def caller_b() -> None:
        with pool._worker("b") as worker:
            got.append(worker)

    thread = threading.Thread(target=caller_b)
    try:
        first.held, second.held = ["x"], []
        with pool._cond:
            pool._idle[:] = [first]
            pool._waiting.append("x")  # x's caller is waiting and has not woken yet
        thread.start()
        time.sleep(0.5)
        assert not got  # b waits: the free worker holds x
        with pool._cond:  # x's caller takes its worker; the other worker comes free
            pool._waiting.remove("x")
            pool._idle[:] = [second]
            pool._cond.notify_all()
        thread.join(10)
        assert got == [second]
    finally:
        with pool._cond:
            pool._idle[:] = list(pool._workers)
            pool._cond.notify_all()
        thread.join(10)
        for w, held in zip(pool._workers, saved, strict=True):
            w.held = held


def test_a_worker_is_kept_for_the_next_stage_of_the_candidate_it_just_ran(pool, monkeypatch):
    """After a stage of a candidate that goes on, another caller does not take that worker in the
    gap before the candidate's next stage (its caller checkpoints, runs the static gate); once
    the grace has passed without it, the other caller does."""
    from agentloop.evaluation import pool as pool_module

    monkeypatch.setattr(pool_module, "RETURN_GRACE_S", 1.5)
    first, second = pool._workers
    saved = [w.held for w in pool._workers]
    got: list = []

    def caller_b() -> None:
        with pool._worker("b") as worker:
            got.append((worker, time.monotonic()))

    try:
        first.held = second.held = []
        for comes_back in (True, False):
            got.clear()
            with pool._cond:
                pool._idle[:] = [first]  # the other worker is busy
            with pool._worker("a") as worker:
                assert worker is first
                worker.keep_for = "a"  # as evaluate_stage does when a's stage passed
            released = time.monotonic()
            thread = threading.Thread(target=caller_b)
            thread.start()
            time.sleep(0.5)
            assert not got  # kept for a
            if comes_back:
                with pool._worker("a") as worker:  # a's next stage: its worker, at once
                    assert worker is first and not got
            thread.join(10)
            assert got and got[0][0] is first
            waited = got[0][1] - released  # let go once a came and went, else at the grace's end
            assert waited < 1.4 if comes_back else waited >= 1.4
            pool._idle[:] = [first]
    finally:
        with pool._cond:
            pool._idle[:] = list(pool._workers)
            pool._kept.clear()
            pool._cond.notify_all()
        for w, held in zip(pool._workers, saved, strict=True):
            w.held = held


def test_a_candidate_comes_back_to_its_parked_runner(pool):
    """Another candidate's stage between two of its stages: the worker parks its runner and
    resumes it (same process), instead of loading it into a new one."""
    from agentloop.evaluation import jobs as worker_jobs

    pool._idle[:] = pool._idle[:1]  # one worker for the three stages
    worker = pool._idle[0]
    state = lambda: worker.sandbox.run(Job.of(worker_jobs.runner_state), timeout=30).value  # noqa: E731
    try:
        # Neither is held now, whatever earlier tests left on this worker: as many other
        # candidates as it holds runners (two on a CPU) take them all.
        assert pool.held_runners == 2
        for filler in ("off_by_scale", "rms_norm_torch"):
            pool.evaluate_stage(code(filler), TASK, "compile", SETTINGS)
        before = state()["loads"]
        for name in ("rms_norm_rows", "batch_path", "rms_norm_rows"):
            outcome = pool.evaluate_stage(code(name), TASK, "compile", SETTINGS)
            assert outcome.passed, outcome.error
        assert worker.held[:2] == [code_hash(code("rms_norm_rows")), code_hash(code("batch_path"))]
        after = state()
        assert after["loads"] - before == 2  # rms_norm_rows loaded once (then resumed), batch_path once
        assert len(after["parked"]) == 1 and after["current"] not in after["parked"]
    finally:
        pool._idle[:] = list(pool._workers)


def test_a_stage_that_found_the_device_full_runs_once_more_in_a_fresh_runner(pool, monkeypatch):
    """On a GPU a stage can fail only because the pool's judges and runners filled the device:
    its worker stops its runners and the stage runs again, once. Another failure does not, and
    a candidate out of memory both times is still rejected."""
    from agentloop.evaluation import jobs as worker_jobs

    def raising(error: str) -> str:
        return f"import torch\ndef rms_norm(x, weight, eps):\n    raise {error}\n"

    full = raising('torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")')
    assert not pool.retry_out_of_memory  # a CPU pool: host memory is each runner's own limit
    monkeypatch.setattr(pool, "retry_out_of_memory", True)
    pool._idle[:] = pool._idle[:1]
    worker = pool._idle[0]
    loads = lambda: worker.sandbox.run(Job.of(worker_jobs.runner_state), timeout=30).value["loads"]  # noqa: E731
    try:
        before, retries = loads(), pool.memory_retries
        outcome = pool.evaluate_stage(full, TASK, "compile", SETTINGS)
        assert not outcome.passed and "CUDA out of memory" in outcome.error
        assert pool.memory_retries == retries + 1 and loads() - before == 2  # again, in a new runner
        other = pool.evaluate_stage(raising('ValueError("no")'), TASK, "compile", SETTINGS)
        assert not other.passed and "ValueError" in other.error and pool.memory_retries == retries + 1
    finally:
        pool._idle[:] = list(pool._workers)
