"""The worker pool: N sandboxed worker processes that evaluate candidates, stage by stage.

A pool holds one `gates.judge.sandbox.Sandbox` per worker (one per visible GPU on cuda, two by
default on a CPU), the same isolation the gates use on their own. Each worker evaluates one
candidate stage at a time; callers on several threads share the pool and block until a worker
is free. Candidate code never runs in the calling process: the static gate, which only reads
source, runs there; compile, dynamic, correctness and benchmark run in a worker
(`agentloop.evaluation.jobs`), each under its stage timeout from `EvalSettings.stage_timeout_s`.

A stage that hangs, crashes its worker (segfault, CPU-time limit, killed for memory) or leaves
the CUDA context corrupted gets a failed `StageOutcome` whose `error` says which, in one line;
the sandbox replaces the worker and the pool carries on with the next stage or candidate.

Several workers may share one GPU (`workers` above the GPU count). Their gate stages then run
side by side, but a benchmark stage runs alone on its device: it waits for the stages running
there to finish, and holds back new ones until it is done, so no other worker's kernels end up
in its timings (`exclusive_benchmark`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from agentloop.evaluation import jobs
from agentloop.evaluation.benchmark import BenchmarkResult
from agentloop.evaluation.stages import BI_STAGES, STAGES, EvalSettings, Stage, StageOutcome, code_hash
from gates.contract import Task
from gates.judge import kernel_cache
from gates.judge.sandbox import Job, JobResult, Sandbox, WorkerLimits
from gates.verdict import GateResult

DEFAULT_CPU_WORKERS = 2
RECYCLE_AFTER = 100
"""Distinct candidates a worker loads before it is replaced by a fresh one: loaded modules and
their compiled kernels stay in a worker's memory."""
HELD_RUNNERS = {"cpu": 2, "cuda": 4}
"""Runners each worker keeps holding a candidate, by device: the current one and the ones before,
parked (frozen) until their next stage. With several loops in flight a candidate's stages rarely
follow each other on one worker; a fresh runner per stage cost the H200 campaign seconds per stage
(docs/lab/gpu/boundary/README.md). A campaign keeps twice as many loops in flight as workers, so
on a GPU, where a fresh runner costs most and memory is plentiful, four per worker hold all of
them with room for a candidate's stages landing on two workers; on a CPU two (memory)."""
RETURN_GRACE_S = 1.0
"""How long a worker that just ran a stage of a candidate that goes on is kept for that
candidate's next stage: in between, its caller saves a checkpoint and, after compile, runs the
static gate. Without it another candidate's stage took the worker in that gap, and the next stage
went to a worker without the candidate's runner (a fresh runner: its kernels loaded, its
autotuning and first calls made again)."""
_MEMORY_SIGNS = ("MemoryError", "can't allocate memory", "Cannot allocate memory", "out of memory")
_DEVICE_MEMORY_SIGNS = ("OutOfMemoryError", "CUDA out of memory")
"""What a stage that found the GPU full says (the judge's or the runner's allocations)."""


def default_stage_timeout(stage: Stage) -> float:
    """The stage's timeout in a default EvalSettings."""
    return EvalSettings().stage_timeout_s[stage]


class _DeviceUse:
    """Who is using one device: stages `shared` (any number at once) or one `exclusive` stage.
    A waiting exclusive stage holds back new shared ones, so benchmarks are not starved."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._waiting)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._exclusive and not self._shared)
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


@dataclass(eq=False)
class _Worker:
    sandbox: Sandbox
    loaded: set[str] = field(default_factory=set)
    """Hashes of the candidates loaded since the worker last started."""
    starts: int = -1
    """`sandbox.restarts` when the worker was last seen started (-1: not yet)."""
    held: list[str] = field(default_factory=list)
    """Hashes of the candidates the worker's runners hold (its current one and the parked
    ones, gates.judge.runner_pool.Runners), most recent first, as the worker keeps them."""
    keep_for: str | None = None
    """Set by the caller before giving the worker back: the candidate whose next stage it is
    kept for (RETURN_GRACE_S)."""


class WorkerPool:
    """Persistent sandboxed workers on one device; thread-safe.

    `workers`: on a CPU, how many worker processes (default 2; each gets an equal share of the
    cores for its torch threads). On cuda, default one per visible GPU; a larger number puts
    several workers on each GPU, round-robin. `limits` are each worker's resource limits.
    `exclusive_benchmark`: a benchmark stage runs alone on its device (default: on cuda when
    workers share a GPU; on a CPU, where all workers share the cores, only when asked).
    """

    def __init__(self, device: Literal["cpu", "cuda"] = "cpu", workers: int | None = None, *,
                 limits: WorkerLimits | None = None, start_timeout: float = 300.0,
                 recycle_after: int = RECYCLE_AFTER, exclusive_benchmark: bool | None = None) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"unknown device {device!r}; use cpu or cuda")
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        # One store of compiled kernels for the pool's judges (gates.judge.kernel_cache): a candidate's
        # kernels are compiled once, whichever worker runs its next stage.
        self._kernels = tempfile.mkdtemp(prefix="agentloop-kernels-")
        # Removed by close() or terminate(), else when the pool is dropped or this process exits (the
        # workers' own directories go with their sandboxes, the same way), else, when this process
        # is killed, by its workers (kernel_cache.OWNER), as they remove their own directories.
        self._remove_kernels = weakref.finalize(self, shutil.rmtree, self._kernels, True)
        env: dict[str, str] = {kernel_cache.VARIABLE: self._kernels, kernel_cache.OWNER: str(os.getpid())}
        if device == "cuda":
            import torch

            gpus = torch.cuda.device_count()
            if not gpus:
                raise ValueError("device cuda but no GPU is visible; use device cpu")
            devices = [f"cuda:{i % gpus}" for i in range(workers or gpus)]
        else:
            devices = ["cpu"] * (workers or DEFAULT_CPU_WORKERS)
            if "OMP_NUM_THREADS" not in os.environ:  # workers side by side, not fighting for cores
                env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // len(devices)))
        self.device = device
        self.recycle_after = recycle_after
        if exclusive_benchmark is None:
            exclusive_benchmark = device == "cuda" and len(set(devices)) < len(devices)
        self.exclusive_benchmark = exclusive_benchmark
        self._use = {d: _DeviceUse() for d in devices}
        self._cond = threading.Condition()
        self._closed = False
        self._workers: list[_Worker] = []
        try:
            # Spare runners per worker: on a GPU two, since a runner's boot (torch, the CUDA
            # context, Triton's driver) takes longer than many stages; on a CPU one, to leave
            # the cores to the stages.
            spares = 2 if device == "cuda" else 1
            self.held_runners = HELD_RUNNERS[device]
            for d in devices:  # each starts booting at once; the first job waits for it
                self._workers.append(_Worker(Sandbox(d, limits=limits, start_timeout=start_timeout, env=env,
                                                     spare_runners=spares, held_runners=self.held_runners)))
        except BaseException:
            for w in self._workers:
                w.sandbox.close()
            self._remove_kernels()
            raise
        self._idle: list[_Worker] = list(self._workers)
        self._waiting: list[str | None] = []
        """The candidates of the callers waiting for a worker."""
        self._kept: dict[str, tuple[_Worker, float]] = {}
        """Candidate -> the free worker kept for its next stage, until when (monotonic)."""
        self.retry_out_of_memory = device == "cuda"
        """Run a stage that ran out of device memory once more, after its worker stopped its
        runners: the GPU is shared by every judge and runner of the pool, and a full one is
        nobody's verdict (docs/lab/gpu/boundary/README.md, session 9)."""
        self.memory_retries = 0
        """Stages run again for that."""
        self.stages_held = 0
        """Stages that ran in a worker whose runners held their candidate (of `stages_run`)."""
        self.stages_run = 0

    # Lifecycle ----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self._workers)

    @property
    def restarts(self) -> int:
        """Workers replaced so far (after hangs, crashes, corrupted CUDA contexts, recycling)."""
        return sum(w.sandbox.restarts for w in self._workers)

    def pids(self) -> list[int | None]:
        """The workers' process ids."""
        return [w.sandbox.pid for w in self._workers]

    def warm_up(self) -> list[int]:
        """Wait until every worker has started (in parallel); their process ids. Raises
        RuntimeError when one cannot start."""
        with self._every_worker() as workers:
            results: list[JobResult | None] = [None] * len(workers)

            def ping(i: int) -> None:
                results[i] = _start(workers[i], force=True)

            threads = [threading.Thread(target=ping, args=(i,)) for i in range(len(workers))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        failed = [r for r in results if r is None or not r.ok]
        if failed:
            raise RuntimeError(f"a worker could not start: {failed[0].error if failed[0] else 'no answer'}")
        return [r.value for r in results]

    def isolation(self) -> dict:
        """The cage the candidates run in, as one worker's runner reports it
        (`gates.judge.isolation.runner_isolation`); empty if it could not say."""
        with self._worker(None) as worker:
            _start(worker)
            said = worker.sandbox.run(Job("gates.judge.isolation:runner_isolation", {}), timeout=120)
        return said.value if said.ok and isinstance(said.value, dict) else {}

    def close(self) -> None:
        """Stop every worker, after the stages running now have finished. Callers still waiting
        for a worker get RuntimeError."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: len(self._idle) == len(self._workers))
            self._idle.clear()
        # In parallel: each worker takes seconds to shut torch down.
        threads = [threading.Thread(target=w.sandbox.close) for w in self._workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._remove_kernels()

    def terminate(self) -> None:
        """Kill every worker at once, without waiting for the stages running now (an interrupted
        run); a stage running now fails, callers waiting for a worker get RuntimeError."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        threads = [threading.Thread(target=w.sandbox.close) for w in self._workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._remove_kernels()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _worker(self, key: str | None) -> Iterator[_Worker]:
        """A free worker for the caller alone, preferably one whose runners hold this
        candidate (its next stage then needs no new runner)."""
        with self._cond:
            self._waiting.append(key)
            try:
                while not (self._closed or self._choice(key) is not None):
                    # Woken by a freed worker, or when a worker kept for another candidate is let go.
                    until = min((t for _, t in self._kept.values()), default=None)
                    self._cond.wait(None if until is None else max(0.0, until - time.monotonic()) + 0.001)
            finally:
                self._waiting.remove(key)
                self._cond.notify_all()  # the workers this caller kept the others from are free
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            worker = self._choice(key)
            self._idle.remove(worker)
            self._kept.pop(key, None)
        try:
            yield worker
        finally:
            with self._cond:
                if worker.keep_for is not None:
                    self._kept[worker.keep_for] = (worker, time.monotonic() + RETURN_GRACE_S)
                    worker.keep_for = None
                self._idle.append(worker)
                self._cond.notify_all()

    def _choice(self, key: str | None) -> _Worker | None:
        """The free worker for a caller of `key`: one holding its candidate, else one holding
        no other waiting caller's candidate (so that a freed worker goes to the stage it can run
        without a new runner, when one is waiting), else none yet. A worker kept for another
        candidate's next stage (RETURN_GRACE_S) is left alone until that time has passed."""
        now = time.monotonic()
        self._kept = {k: (w, t) for k, (w, t) in self._kept.items() if t > now and w in self._idle}
        kept = [w for k, (w, _) in self._kept.items() if k != key]
        free = [w for w in self._idle if w not in kept]
        mine = next((w for w in free if key in w.held), None)
        if mine is not None:
            return mine
        others = {k for k in self._waiting if k != key}
        return next((w for w in free if others.isdisjoint(w.held)), None)

    @contextmanager
    def _every_worker(self) -> Iterator[list[_Worker]]:
        with self._cond:
            self._cond.wait_for(lambda: self._closed or len(self._idle) == len(self._workers))
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            taken, self._idle = self._idle, []
        try:
            yield taken
        finally:
            with self._cond:
                self._idle.extend(taken)
                self._cond.notify_all()

    # Evaluation ---------------------------------------------------------------------------
    def evaluate_stage(self, code: str, task: Task, stage: Stage, settings: EvalSettings) -> StageOutcome:
        """Run one stage on one candidate, blocking until a worker is free (the static gate
        needs none). Never raises for anything the candidate does."""
        self._check(settings, [stage])
        if stage == "static":
            return static_outcome(code, task)
        key = code_hash(code)
        with self._worker(key) as worker:
            outcome = self._run(worker, code, task, stage, settings)
            if stage != STAGES[-1] and (outcome.passed or stage in BI_STAGES):
                worker.keep_for = key  # its next stage is coming
            return outcome

    def evaluate(self, code: str, task: Task, settings: EvalSettings, stages: Sequence[Stage] = STAGES, *,
                 observe_bi: bool = False) -> list[StageOutcome]:
        """Run the stages (in pipeline order) on one candidate in one worker, stopping after the
        first that fails. `observe_bi` (baseline mode): a failed static or dynamic stage is
        recorded and the candidate goes on."""
        self._check(settings, stages)
        outcomes: list[StageOutcome] = []
        with self._worker(code_hash(code)) as worker:
            for stage in (s for s in STAGES if s in stages):
                if stage == "static":
                    outcome = static_outcome(code, task)
                else:
                    outcome = self._run(worker, code, task, stage, settings)
                outcomes.append(outcome)
                if not outcome.passed and not (observe_bi and stage in BI_STAGES):
                    break
        return outcomes

    def _check(self, settings: EvalSettings, stages: Sequence[str]) -> None:
        if settings.device != self.device:
            raise ValueError(f"settings.device is {settings.device} but this pool runs on {self.device}")
        unknown = [s for s in stages if s not in STAGES]
        if unknown:
            raise ValueError(f"unknown stage {unknown[0]!r}; stages are {', '.join(STAGES)}")

    def _run(self, worker: _Worker, code: str, task: Task, stage: Stage,
             settings: EvalSettings) -> StageOutcome:
        outcome = self._run_once(worker, code, task, stage, settings)
        if not (self.retry_out_of_memory and out_of_device_memory(outcome)):
            return outcome
        with self._cond:
            self.memory_retries += 1
        worker.sandbox.run(Job.of(jobs.release_runners), timeout=60)
        worker.held = []
        again = self._run_once(worker, code, task, stage, settings)
        return again.model_copy(update={"seconds": outcome.seconds + again.seconds})

    def _run_once(self, worker: _Worker, code: str, task: Task, stage: Stage,
                  settings: EvalSettings) -> StageOutcome:
        key = code_hash(code)
        sandbox = worker.sandbox
        if key not in worker.loaded and len(worker.loaded) >= self.recycle_after:
            sandbox.restart()
        booted = _start(worker)  # outside the stage's time and timeout
        if booted is None and key not in worker.held:  # a new candidate: its runner boots outside too
            booted = sandbox.run(Job.of(jobs.ping), timeout=60)
        if booted is not None and not booted.ok:
            return stage_outcome(stage, booted, booted.seconds)
        kwargs: dict = {"code": code, "task": task, "device": sandbox.device}
        if stage == "benchmark":
            kwargs.update(cuda_graph=settings.cuda_graph, compile_reference=settings.compile_reference,
                          production_baselines=settings.production_baselines)
        timeout = settings.stage_timeout_s.get(stage, default_stage_timeout(stage))
        use = self._use[sandbox.requested_device]
        alone = self.exclusive_benchmark and stage == "benchmark"
        with use.exclusive() if alone else use.shared():
            start = time.perf_counter()  # the stage's time starts once it may use the device
            result = sandbox.run(Job.of(jobs.JOBS[stage], **kwargs), timeout)
            seconds = time.perf_counter() - start
        if not result.restarted:
            worker.loaded.add(key)
        with self._cond:
            self.stages_run += 1
            self.stages_held += key in worker.held
        held = [] if result.restarted else [k for k in worker.held if k != key]
        worker.held = [key, *held][:self.held_runners]
        return stage_outcome(stage, result, seconds)


def _start(worker: _Worker, force: bool = False) -> JobResult | None:
    """Wait until a worker process that has not run a job yet has started (an empty job);
    None when it had already run one."""
    sandbox = worker.sandbox
    if sandbox.restarts == worker.starts and not force:
        return None
    result = sandbox.run(Job.of(jobs.ping), timeout=60)
    if result.ok:
        if sandbox.restarts != worker.starts:
            worker.loaded.clear()
        worker.starts = sandbox.restarts
    return result


def out_of_device_memory(outcome: StageOutcome) -> bool:
    """Whether the stage failed because an allocation on the device did not fit."""
    if outcome.passed:
        return False
    texts = [outcome.error or ""]
    if outcome.gate is not None:
        texts += [f.message for f in outcome.gate.findings]
    return any(sign in text for text in texts for sign in _DEVICE_MEMORY_SIGNS)


def _memory_marked(error: str) -> str:
    if any(sign in error for sign in _MEMORY_SIGNS) and not error.startswith("out of memory"):
        return f"out of memory: {error}"
    return error


def failure_text(result: JobResult) -> str:
    """One line for a job that did not return a result: the sandbox's reason (exception,
    "timed out after N s", how the worker crashed), marked where the candidate ran out of
    memory, and whether the worker was replaced."""
    error = _memory_marked(result.error or f"the job ended with status {result.status}")
    return f"{error}; worker replaced" if result.restarted else error


def stage_outcome(stage: Stage, result: JobResult, seconds: float) -> StageOutcome:
    """A stage's outcome from its job's result."""
    value = result.value
    if not result.ok and isinstance(value, GateResult | BenchmarkResult):
        # The job returned, then the worker was found unusable (a corrupted CUDA context): the
        # job's own error says where the fault surfaced, the sandbox's why the worker went.
        error = failure_text(result)
        if value.error:
            error = f"{_memory_marked(value.error)}; CUDA context corrupted, worker replaced"
        if isinstance(value, GateResult):
            gate = value.model_copy(update={"passed": False, "error": error})
            return StageOutcome(stage=stage, passed=False, seconds=seconds, gate=gate, error=error)
        bench = value.model_copy(update={"correct": False, "speedup": -1.0, "error": error})
        return StageOutcome(stage=stage, passed=False, seconds=seconds, benchmark=bench, error=error)
    if not result.ok:
        value = None
    if isinstance(value, GateResult):
        error = _memory_marked(value.error) if value.error else None
        gate = value.model_copy(update={"error": error})
        return StageOutcome(stage=stage, passed=value.passed, seconds=seconds, gate=gate, error=error)
    if isinstance(value, BenchmarkResult):
        error = value.error
        if error is None and not value.correct:
            error = "the re-check on fresh inputs did not pass"
        error = _memory_marked(error) if error else None
        return StageOutcome(stage=stage, passed=value.correct and error is None, seconds=seconds,
                            benchmark=value, error=error)
    error = failure_text(result) if not result.ok else \
        f"the {stage} job returned {type(result.value).__name__}, not a result"
    gate = None if stage == "benchmark" else GateResult(gate=stage, passed=False, seconds=seconds,
                                                        error=error)
    return StageOutcome(stage=stage, passed=False, seconds=seconds, gate=gate, error=error)


def static_outcome(code: str, task: Task) -> StageOutcome:
    """The static gate, run here: it parses the source and never runs it."""
    start = time.perf_counter()
    try:
        from gates.static import static_gate

        gate = static_gate(code, task, filename=jobs.CANDIDATE_NAME)
    except Exception as exc:  # noqa: BLE001 - a bug in the static gate must not pass silently
        error = f"static gate failed: {type(exc).__name__}: {exc}"
        gate = GateResult(gate="static", passed=False, seconds=time.perf_counter() - start, error=error)
    return StageOutcome(stage="static", passed=gate.passed, seconds=time.perf_counter() - start, gate=gate,
                        error=gate.error)
