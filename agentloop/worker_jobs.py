"""The jobs a worker runs for the pool, one per evaluation stage (the static gate excepted: it
only reads source, so the pool runs it in the orchestrator).

Every job runs inside a `gates.sandbox.Sandbox` worker process and receives the candidate's
code, not a path: it writes the code to a file in the worker's own temporary directory (one
file per content, so a worker loads each candidate once) and loads it from there. The gate
jobs are the gates' own (`gates.dynamic.dynamic_job`, `gates.correctness.correctness_job`); the
benchmark job is `agentloop.benchmark.benchmark_candidate`.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

from agentloop.benchmark import BenchmarkResult, benchmark_candidate
from agentloop.evaluation import code_hash
from agentloop.timer import BenchSettings
from gates.contract import Task
from gates.verdict import GateResult

CANDIDATE_NAME = "candidate.py"
"""The file name a candidate's errors and tracebacks show."""


class NetworkDisabled(PermissionError):
    """Raised by any network connection a candidate attempts in a worker."""


def _refusing(original):
    def method(self, *args, **kwargs):
        if self.family == socket.AF_UNIX:  # local pipes between processes are not network
            return original(self, *args, **kwargs)
        raise NetworkDisabled("network access is disabled in evaluation workers")

    return method


def _refuse(*args: object, **kwargs: object) -> None:
    raise NetworkDisabled("network access is disabled in evaluation workers")


def block_network() -> None:
    """Best effort, in Python: refuse network connections and name lookups in this process.
    (The worker's pipe to the pool is a plain file descriptor and does not go through these.)
    A candidate that uses ctypes can still get around it; SPEC.md §2 forbids sockets anyway."""
    if getattr(socket, "_agentloop_blocked", False):
        return
    for name in ("connect", "connect_ex", "sendto", "bind"):
        setattr(socket.socket, name, _refusing(getattr(socket.socket, name)))
    socket.create_connection = _refuse
    socket.getaddrinfo = _refuse
    socket._agentloop_blocked = True


def write_candidate(code: str) -> str:
    """The path of the candidate's file in this worker's temporary directory (the sandbox points
    TMPDIR there), written on first use. One directory per content: the loader caches modules
    by path, and every candidate's file keeps the same short name."""
    folder = Path(tempfile.gettempdir()) / "candidates" / code_hash(code)[:16]
    path = folder / CANDIDATE_NAME
    if not path.is_file() or path.read_text() != code:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    return str(path)


def smallest_shape(task: Task, device: str) -> dict[str, int]:
    """The task's correctness shape with the fewest elements (ties: the first)."""
    def size(dims: dict[str, int]) -> int:
        n = 1
        for v in dims.values():
            n *= v
        return n

    return min(task.shapes_for(device), key=size)


def compile_job(code: str, task: Task, device: str) -> GateResult:
    """Load the candidate, check it defines the entry function, and call it once at the smallest
    shape (so import errors, Triton compile errors and launch errors surface here)."""
    import torch

    from gates.candidate import CandidateError, candidate_entry, describe_exception
    from gates.reference import make_inputs

    block_network()
    start = time.perf_counter()
    failed = lambda error: GateResult(gate="compile", passed=False, error=error,
                                      seconds=time.perf_counter() - start)
    try:
        _, fn = candidate_entry(write_candidate(code), task.entry)
    except CandidateError as exc:
        return failed(str(exc).replace(str(Path(tempfile.gettempdir())) + os.sep, ""))
    dims, dtype = smallest_shape(task, device), task.dtypes[0]
    case = f"{dtype} " + " ".join(f"{k}={v}" for k, v in dims.items())
    try:
        inputs = make_inputs(task, dims, dtype, 0, device)
    except Exception as exc:  # noqa: BLE001 - the task's own generator: not the candidate's fault
        return failed(f"cannot make inputs at {case}: {describe_exception(exc)}")
    try:
        fn(*inputs.values())
        if device != "cpu":
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the candidate's failure is the result
        return failed(f"first call at {case} raised {describe_exception(exc)}")
    return GateResult(gate="compile", passed=True, seconds=time.perf_counter() - start)


def dynamic_job(code: str, task: Task, device: str) -> GateResult:
    """The dynamic BI gate on the candidate (gates.dynamic)."""
    from gates.dynamic import dynamic_job as gate_job

    block_network()
    return gate_job(candidate=write_candidate(code), task=task, device=device)


def correctness_job(code: str, task: Task, device: str) -> GateResult:
    """The correctness gate and the anti-cheat checks on the candidate (gates.correctness)."""
    from gates.correctness import correctness_job as gate_job

    block_network()
    return gate_job(candidate=write_candidate(code), task=task, device=device)


def benchmark_job(code: str, task: Task, device: str, cuda_graph: bool = False,
                  compile_reference: bool = False) -> BenchmarkResult:
    """Time the candidate against the reference on the task's bench shapes (agentloop.benchmark)."""
    from gates.candidate import CandidateError, candidate_entry
    from gates.reference import reference_fn

    block_network()
    try:
        _, fn = candidate_entry(write_candidate(code), task.entry)
    except CandidateError as exc:
        return BenchmarkResult(task=task.name, dtype=task.dtypes[0], device=device, error=str(exc))
    settings = BenchSettings.for_device(device, cuda_graph=cuda_graph)
    return benchmark_candidate(fn, reference_fn(task), task, device, settings=settings,
                               compile_reference=compile_reference)


def ping() -> int:
    """A job that does nothing: the worker's process id (warm-up, tests)."""
    return os.getpid()


JOBS = {"compile": compile_job, "dynamic": dynamic_job, "correctness": correctness_job,
        "benchmark": benchmark_job}
"""The job of each stage that runs in a worker."""
