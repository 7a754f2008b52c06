"""The jobs a worker runs for the pool, one per evaluation stage (the static gate excepted: it
only reads source, so the pool runs it in the orchestrator).

Every job runs inside a `gates.judge.sandbox.Sandbox` worker process, the judge, and receives the
candidate's code; the judge hands it to a caged runner process (`gates.judge.client`) and never
imports it. The gate jobs are the gates' own (`gates.dynamic.dynamic_job`,
`gates.correctness.correctness_job`); the benchmark job is
`agentloop.evaluation.benchmark.benchmark_candidate`, with the candidate timed in its runner and the
reference here.
"""

from __future__ import annotations

import os
import time

from agentloop.evaluation.benchmark import BenchmarkResult, benchmark_candidate, timed_baselines
from agentloop.evaluation.timer import BenchSettings
from gates.contract import Task
from gates.runner.driver import CANDIDATE_NAME  # noqa: F401 - the name the runner gives a candidate's file
from gates.verdict import GateResult


def smallest_shape(task: Task, device: str) -> dict[str, int]:
    """The task's correctness shape with the fewest elements (ties: the first)."""
    def size(dims: dict[str, int]) -> int:
        n = 1
        for v in dims.values():
            n *= v
        return n

    return min(task.shapes_for(device), key=size)


def compile_job(code: str, task: Task, device: str) -> GateResult:
    """Load the candidate in a runner, check it defines the entry function, and call it once at
    the smallest shape (so import errors, Triton compile errors and launch errors surface here)."""
    from gates.candidate import describe_exception
    from gates.judge.client import RemoteEntry
    from gates.judge.runner_pool import run_gate
    from gates.reference import make_inputs

    def body(runner, _changes) -> GateResult:
        start = time.perf_counter()
        failed = lambda error: GateResult(gate="compile", passed=False, error=error,
                                          seconds=time.perf_counter() - start)
        dims, dtype = smallest_shape(task, device), task.dtypes[0]
        case = f"{dtype} " + " ".join(f"{k}={v}" for k, v in dims.items())
        try:
            inputs = make_inputs(task, dims, dtype, 0, device)
        except Exception as exc:  # noqa: BLE001 - the task's own generator: not the candidate's fault
            return failed(f"cannot make inputs at {case}: {describe_exception(exc)}")
        try:
            RemoteEntry(runner)(*inputs.values())
        except Exception as exc:  # noqa: BLE001 - the candidate's failure is the result
            return failed(f"first call at {case} raised {describe_exception(exc)}")
        return GateResult(gate="compile", passed=True, seconds=time.perf_counter() - start)

    return run_gate("compile", code, task, device, body)


def dynamic_job(code: str, task: Task, device: str) -> GateResult:
    """The dynamic BI gate on the candidate (gates.dynamic)."""
    from gates.dynamic import dynamic_job as gate_job

    return gate_job(code=code, task=task, device=device)


def correctness_job(code: str, task: Task, device: str) -> GateResult:
    """The correctness gate and the anti-cheat checks on the candidate (gates.correctness)."""
    from gates.correctness import correctness_job as gate_job

    return gate_job(code=code, task=task, device=device)


def benchmark_job(code: str, task: Task, device: str, cuda_graph: bool = False,
                  compile_reference: bool = False, production_baselines: bool = True) -> BenchmarkResult:
    """Time the candidate (in its runner) against the reference (here) on the task's bench
    shapes (agentloop.evaluation.benchmark), with the task's production baselines unless told not to."""
    from gates.judge.client import CandidateFailure
    from gates.judge.runner_pool import RUNNERS, reference_dirs
    from gates.reference import reference_fn
    from gates.runner.loader import CandidateError

    try:
        runner, _ = RUNNERS.for_code(code, task.entry, device, reference_dirs(task))
    except (CandidateError, CandidateFailure) as exc:
        message = getattr(exc, "described", None) or str(exc)
        return BenchmarkResult(task=task.name, dtype=task.dtypes[0], device=device, error=message)
    settings = BenchSettings.for_device(device, cuda_graph=cuda_graph)
    return benchmark_candidate(runner, reference_fn(task), task, device, settings=settings,
                               compile_reference=compile_reference,
                               baselines=timed_baselines(task, compile_reference, production_baselines))


def ping() -> int:
    """The worker's process id, once its next spare runner has booted too (warm-up, tests): so
    the first candidate's stages do not count the runner's start-up."""
    from gates.judge.runner_pool import RUNNERS

    RUNNERS.wait_spare()
    return os.getpid()


def release_runners() -> None:
    """Stop this judge's runners, before a stage that ran out of device memory runs again
    (agentloop.evaluation.pool); the judge's cached device memory goes back after every job anyway
    (gates.judge.sandbox)."""
    import gc

    from gates.judge.runner_pool import RUNNERS

    RUNNERS.close()
    gc.collect()  # so that cycles are gone before the cache is emptied


def runner_state() -> dict:
    """The worker's runners (diagnostics, tests): the current one's and the parked ones' process
    ids, and how many candidates were loaded into fresh runners."""
    from gates.judge.runner_pool import RUNNERS

    current = RUNNERS.current.proc.pid if RUNNERS.current is not None else None
    return {"current": current, "parked": [r.proc.pid for r in RUNNERS.parked], "loads": RUNNERS.loads}


JOBS = {"compile": compile_job, "dynamic": dynamic_job, "correctness": correctness_job,
        "benchmark": benchmark_job}
"""The job of each stage that runs in a worker."""
