"""Judge worker processes: where the gates run, next to (never inside) the candidate's runner.

A `Sandbox` is one persistent worker process bound to one device. It runs jobs (module-level
functions, e.g. a gate) one at a time, each with a timeout. The worker is the judge: it never
imports candidate code; each job hands the candidate to a caged runner process of its own
(`gates.judge.client`, `gates.runner`) and judges what comes back. The parent never dies with a
worker: a job that hangs is killed and reported as "timed out after N s"; a worker that crashes
or whose CUDA context is left corrupted is killed and replaced (and whatever its runners left
is swept), and the next job runs in a fresh worker. A pool keeps N sandboxes (one per GPU, a
configurable number on CPU).

The worker runs with an environment without secrets (`gates.judge.environment.judge_environ`), a
temporary working directory, its stdout/stderr sent to a log file there, an address-space limit
on CPU and a CPU-time limit per job. Its results come back pickled, and the parent unpickles
only the result types of the gates and the benchmark (`_ResultUnpickler`).

This module imports no torch or triton at import time, so the parent stays light.
"""

from __future__ import annotations

import importlib
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gates.judge.environment import judge_environ
from gates.judge.runner_process import describe_exit, sweep_judge
from gates.runner.loader import describe_exception

JobStatus = Literal["ok", "error", "timeout", "crash"]
LOG_NAME = "worker.log"


@dataclass(frozen=True)
class Job:
    """A call to run in the worker: a module-level function (as "module:qualname") and its
    keyword arguments, both picklable."""

    fn: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, fn: Callable | str, **kwargs: Any) -> Job:
        if not isinstance(fn, str):
            fn = f"{fn.__module__}:{fn.__qualname__}"
        return cls(fn, kwargs)


class JobResult(BaseModel):
    """What became of one job."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    status: JobStatus
    value: Any = None
    """The job's return value when status is "ok"."""
    error: str | None = None
    """One line: the exception, "timed out after N s", or how the worker crashed."""
    seconds: float = 0.0
    restarted: bool = False
    """The worker was replaced after this job (hang, crash, corrupted CUDA context)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class WorkerLimits(BaseModel):
    """Resource limits of a worker process."""

    model_config = ConfigDict(extra="forbid")
    memory_bytes: int | None = None
    """Address space a CPU worker may add beyond what it uses once started (RLIMIT_AS);
    None: half of physical memory. Not applied to CUDA workers."""
    cpu_seconds: float | None = None
    """CPU time one job may use (RLIMIT_CPU, all threads together); None: generous, derived
    from the job timeout and the core count, so that only the wall-clock timeout binds."""


class Sandbox:
    """One worker process on one device ("cpu", "cuda" or "cuda:N").

    `run(job, timeout)` never raises for anything the job does. Not thread-safe: a pool gives
    each sandbox to one caller at a time.
    """

    def __init__(self, device: str = "cpu", *, limits: WorkerLimits | None = None,
                 start_timeout: float = 300.0, env: dict[str, str] | None = None,
                 spare_runners: int = 0, held_runners: int = 1) -> None:
        if device != "cpu" and not re.fullmatch(r"cuda(:\d+)?", device):
            raise ValueError(f"unknown device {device!r}; use cpu, cuda or cuda:N")
        self.requested_device = device
        self.device = "cpu" if device == "cpu" else "cuda"
        """The device as jobs see it inside the worker."""
        self.limits = limits or WorkerLimits()
        self.start_timeout = start_timeout
        self._extra_env = dict(env or {})
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._workdir: Path | None = None
        self._ready = False
        self._finalizer: weakref.finalize | None = None
        self._cpu_seconds: float | None = None
        self.spare_runners = spare_runners
        """Runners kept booting for the next candidates (pools; not worth it for one audit)."""
        self.held_runners = held_runners
        """Runners kept holding recent candidates, the current one included
        (gates.judge.runner_pool.Runners)."""
        self.restarts = 0
        self._start()

    # Lifecycle ----------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = judge_environ(os.environ)
        env.update(self._extra_env)
        if self.device == "cpu":
            # Triton kernels can only run on a CPU through its interpreter.
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
            index = self.requested_device.partition(":")[2]
            if index:
                visible = os.environ.get("CUDA_VISIBLE_DEVICES")
                ids = [v.strip() for v in visible.split(",")] if visible else None
                env["CUDA_VISIBLE_DEVICES"] = ids[int(index)] if ids else index
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _start(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="agentloop-worker-"))
        parent_sock, child_sock = socket.socketpair()
        env = self._env()
        env["TMPDIR"] = str(self._workdir)
        code = "from gates.judge.sandbox import _worker_main; _worker_main()"
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code, str(child_sock.fileno())],
            pass_fds=(child_sock.fileno(),), cwd=self._workdir, env=env,
            stdin=subprocess.DEVNULL, start_new_session=True)
        child_sock.close()
        self._conn = Connection(parent_sock.detach())
        memory = self.limits.memory_bytes
        if memory is None and self.device == "cpu":
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        self._conn.send({"sys_path": [os.path.abspath(p) if p in ("", ".") else p for p in sys.path],
                         "device": self.device, "memory_bytes": memory if self.device == "cpu" else None,
                         "parent": os.getpid(), "spares": self.spare_runners,
                         "held": self.held_runners,
                         "runner_memory_bytes": self.limits.memory_bytes,
                         "log": str(self._workdir / LOG_NAME)})
        self._ready = False
        self._finalizer = weakref.finalize(self, _destroy, self._proc, self._conn, self._workdir)

    def _stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._proc = self._conn = self._workdir = self._finalizer = None

    def restart(self) -> None:
        """Replace the worker with a fresh one (for example between candidates)."""
        self._stop()
        self.restarts += 1
        self._start()

    def close(self) -> None:
        """Stop the worker (at once: it holds nothing worth a graceful exit) and remove its
        working directory."""
        self._stop()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def workdir(self) -> Path | None:
        return self._workdir

    # Running jobs -------------------------------------------------------------------------
    def _wait_ready(self) -> str | None:
        """None once the worker is ready, else why it never became ready."""
        if self._ready:
            return None
        if self._conn.poll(self.start_timeout):
            try:
                message = _ResultUnpickler.loads(self._conn.recv_bytes())
            except (EOFError, OSError, pickle.UnpicklingError):
                message = None
            if message and message[0] == "ready":
                self._ready = True
                return None
            if message and message[0] == "boot-error":
                return f"worker failed to start: {message[1]}"
            return f"worker failed to start: {self._death()}"
        return f"worker failed to start within {self.start_timeout:g} s"

    def run(self, job: Job, timeout: float, progress: Callable[[str], None] | None = None) -> JobResult:
        """Run one job in the worker, waiting at most `timeout` seconds for it (worker start-up
        not included). `progress` is called with each line the job reports (`report_progress`)."""
        if self._proc is None:
            self._start()
        failure = self._wait_ready()
        if failure:
            self.restart()
            return JobResult(status="crash", error=failure, restarted=True)
        cpu = self.limits.cpu_seconds or timeout * (os.cpu_count() or 1) + 30
        self._cpu_seconds = cpu
        start = time.perf_counter()
        try:
            self._conn.send(("run", job.fn, job.kwargs, cpu, timeout))
        except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
            if isinstance(exc, OSError):
                error = f"worker crashed: {self._death()}"
                self.restart()
                return JobResult(status="crash", error=error, restarted=True)
            return JobResult(status="error", error=f"job cannot be sent to the worker: {exc}")
        while True:
            left = start + timeout - time.perf_counter()
            if left <= 0 or not self._conn.poll(left):
                self.restart()
                return JobResult(status="timeout", error=f"timed out after {timeout:g} s",
                                 seconds=time.perf_counter() - start, restarted=True)
            try:
                message = _ResultUnpickler.loads(self._conn.recv_bytes())
                if message[0] == "progress":
                    if progress is not None:
                        progress(str(message[1]))
                    continue
                _, status, value, error, seconds, fatal = message
            except Exception as exc:  # noqa: BLE001 - EOF: the worker died; else an unreadable result
                crashed = isinstance(exc, (EOFError, OSError))
                error = f"worker crashed: {self._death()}" if crashed else f"job result unreadable: {exc}"
                self.restart()
                return JobResult(status="crash" if crashed else "error", error=error,
                                 seconds=time.perf_counter() - start, restarted=True)
            break
        if fatal:
            self.restart()
        return JobResult(status=status, value=value, error=error, seconds=seconds, restarted=bool(fatal))

    def _death(self) -> str:
        """How the worker ended, one line, from its exit status and its log."""
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return "worker stopped answering"
        log = self._workdir / LOG_NAME if self._workdir else None
        tail = log.read_text(errors="replace")[-20000:] if log and log.is_file() else ""
        return describe_worker_exit(code, tail, self._cpu_seconds)


def _destroy(proc: subprocess.Popen, conn: Connection, workdir: Path) -> None:
    """Kill the worker's process group (it may have started compilers) and whatever its runners
    left, and remove its files."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    sweep_judge(proc.pid)
    conn.close()
    shutil.rmtree(workdir, ignore_errors=True)


def describe_worker_exit(code: int, log_tail: str, cpu_seconds: float | None = None) -> str:
    """One line saying how a worker process ended: signal, or exit status, plus the last
    Python frame outside the installed packages that the fault handler printed."""
    what = describe_exit(code, cpu_seconds)
    where = ""
    library = (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
               str(Path(__file__).parents[1]))
    for line in log_tail.splitlines():
        match = re.match(r'\s*File "([^"]+)", line (\d+)', line)
        if match and not match[1].startswith(library) and "site-packages" not in match[1]:
            where = f" at {Path(match[1]).name} line {match[2]}"
            break
    last = [ln.strip() for ln in log_tail.splitlines() if ln.strip()]
    detail = ""
    if code >= 0 and last:
        detail = f": {last[-1][:300]}"
    return f"{what}{where}{detail}"


class _ResultUnpickler(pickle.Unpickler):
    """Unpickles what a judge worker sends back, and refuses any other class: results are data
    (pydantic models of the gates and the benchmark, builtins), never something to call."""

    SAFE_MODULES = ("gates.verdict", "agentloop.evaluation.benchmark", "agentloop.evaluation.timer",
                    "pydantic", "pydantic_core", "collections", "datetime")
    SAFE_BUILTINS = {"dict", "list", "tuple", "set", "frozenset", "str", "bytes", "int", "float", "bool",
                     "complex", "NoneType", "slice", "range"}

    def find_class(self, module: str, name: str) -> Any:
        if (module == "builtins" and name in self.SAFE_BUILTINS) or module in self.SAFE_MODULES or \
                (module == "copyreg" and name in ("__newobj__", "__newobj_ex__", "_reconstructor")) or \
                module.startswith(tuple(m + "." for m in self.SAFE_MODULES)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a worker result may not contain {module}.{name}")

    @classmethod
    def loads(cls, data: bytes) -> Any:
        import io

        return cls(io.BytesIO(data)).load()


# The worker process ----------------------------------------------------------------------
_job_conn: list[Connection] = []
"""The worker's connection to its parent, while a job runs (for `report_progress`)."""


def report_progress(text: str) -> None:
    """Inside a job: tell the parent where the job is (one short line, e.g. "batch 17"); the
    parent's `Sandbox.run(progress=...)` gets it. Does nothing outside a worker."""
    if _job_conn:
        try:
            _job_conn[0].send(("progress", text[:200]))
        except (OSError, ValueError):
            pass


def _resolve(fn: str) -> Callable:
    module, _, qualname = fn.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _set_cpu_limit(seconds: float) -> None:
    import resource

    used = resource.getrusage(resource.RUSAGE_SELF)
    total = used.ru_utime + used.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(total + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _set_memory_limit(extra: int) -> None:
    import resource

    with open("/proc/self/statm") as f:
        current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (current + extra, resource.RLIM_INFINITY))


def _cuda_broken() -> str | None:
    """None when the CUDA context still works after a job, else the error it now raises."""
    import torch

    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
    except Exception as exc:  # noqa: BLE001
        return describe_exception(exc)
    return None


_leaving = threading.Lock()


def _leave(parent: int, workdir: str) -> None:
    """The parent is gone (killed without a chance to stop this worker): stop the runners, remove
    this worker's directory and, once the parent is seen gone, the kernel store it left
    (`gates.judge.kernel_cache.remove_orphaned`). Once, whichever thread gets here first."""
    with _leaving:
        try:
            from gates.judge import runner_pool

            runner_pool.RUNNERS.close()
        except Exception:  # noqa: BLE001, S110 - leaving anyway; the runners die with this process
            pass
        shutil.rmtree(workdir, ignore_errors=True)
        from gates.judge import kernel_cache

        deadline = time.monotonic() + 2.0  # its end of the connection closes before it is reaped
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.05)
        if os.getppid() != parent:
            kernel_cache.remove_orphaned(parent)


def _exit_with(parent: int, workdir: str) -> None:
    """Watchdog thread: end the worker, and remove its directory, when its parent is gone
    (killed without a chance to stop it), even in the middle of a hanging job."""
    while os.getppid() == parent:
        time.sleep(1.0)
    _leave(parent, workdir)
    os._exit(1)


def _worker_main() -> None:
    conn = Connection(int(sys.argv[1]))
    config = conn.recv()
    workdir = os.path.dirname(config["log"])
    threading.Thread(target=_exit_with, args=(config["parent"], workdir), daemon=True).start()
    sys.path[:] = config["sys_path"]
    # Candidate prints and native crash reports go to the log, never into the parent's output.
    log = os.open(config["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    import faulthandler
    import resource

    faulthandler.enable(file=sys.stderr, all_threads=False)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file behind
    try:
        import torch
        import triton  # noqa: F401 - imported once here, not inside the first timed job

        if config["device"] == "cuda":
            torch.zeros(1, device="cuda").add_(1).item()
        if config["memory_bytes"]:
            _set_memory_limit(config["memory_bytes"])
    except BaseException as exc:  # noqa: BLE001
        conn.send(("boot-error", describe_exception(exc)))
        return
    from gates.contract import tasks_dir
    from gates.judge import client, runner_pool

    runner_pool.RUNNERS.keep_spares = int(config.get("spares") or 0)
    runner_pool.RUNNERS.keep_held = int(config.get("held") or 1)
    runner_pool.RUNNERS.memory_bytes = config.get("runner_memory_bytes")
    runner_pool.RUNNERS.prestart(config["device"], [str(tasks_dir().resolve())])
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone: the same clean-up as the watchdog's
            _leave(config["parent"], workdir)
            return
        if message[0] == "stop":
            runner_pool.RUNNERS.close()
            return
        _, fn, kwargs, cpu_seconds, timeout = message
        _set_cpu_limit(cpu_seconds)
        client.set_deadline(timeout - min(5.0, 0.1 * timeout), timeout)  # before the parent gives up
        start = time.perf_counter()
        status, value, error, fatal = "ok", None, None, False
        _job_conn[:] = [conn]
        try:
            value = _resolve(fn)(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - the job's failure is the result
            status, error = "error", describe_exception(exc)
        finally:
            _job_conn.clear()
        if config["device"] == "cuda":
            broken = _cuda_broken()
            if broken:
                status, fatal = "error", True
                error = error or f"CUDA context corrupted: {broken}"
        seconds = time.perf_counter() - start
        try:
            conn.send(("done", status, value, error, seconds, fatal))
        except Exception as exc:  # noqa: BLE001 - an unpicklable return value
            conn.send(("done", "error", None, f"job result cannot be returned: {describe_exception(exc)}",
                       seconds, fatal))
        if fatal:
            return
        if config["device"] == "cuda":
            # What the job cached goes back to the GPU that this judge shares with the pool's
            # other judges and every runner (after the answer: outside the stage's time).
            torch.cuda.empty_cache()
