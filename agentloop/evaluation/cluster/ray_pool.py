"""The Ray back-end of the evaluation: a pool of evaluation actors on a Ray cluster, used by the
campaign runner exactly like the local `WorkerPool` (`evaluate_stage`, `size`, `close`,
`terminate`).

Each actor (`agentloop.evaluation.cluster.actor.EvaluationActor`) owns one GPU, or `cpus_per_actor` CPUs on
a cpu campaign, wherever Ray's scheduler places it, and evaluates stages in its own local worker
pool: judge workers and caged runners on the actor's node. The driver (this process) keeps the
loops, the LLM calls, the results store, the checkpoints and the evaluation cache, and runs the
static gate (it only reads source). A slot is one judge worker of an actor; the pool has
`actors x workers_per_actor` slots, and the runner keeps twice as many loops in flight.

Faults. An actor that dies in the middle of a stage (its process or its node lost), or that
does not answer within the stage's time-out plus the time its workers may take to start, is
killed and replaced (the replacement waits for room on the cluster), and the stage is queued
again on another actor, once per candidate and stage; lost a second time, the stage fails as
the candidate's crash, saying so. A stage that hangs inside an actor is stopped there by its
own time-out, as on one machine. Nodes that join later get actors of their own.

Heterogeneous nodes: every actor reports its device name; benchmarks all run on actors of one
device type (`timing_device`, default the most common type at start), so that the speedups a
run compares come from one type of device; each benchmark result names the device that timed
it (`BenchmarkResult.device_name`).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentloop.evaluation.cluster.actor import EvaluationActor, task_digest
from agentloop.evaluation.pool import default_stage_timeout, static_outcome
from agentloop.evaluation.stages import (
    STAGES,
    EvalSettings,
    Stage,
    StageOutcome,
    code_hash,
    evaluation_code_version,
)
from gates.contract import Task
from gates.verdict import GateResult

log = logging.getLogger("agentloop")

REQUEUES = 1
"""Times a stage whose actor was lost is queued again before it counts as the candidate's crash."""
ANSWER_MARGIN_S = 120.0
"""Beyond a stage's time-out and its workers' start-up, how long the driver waits for an actor's
answer before it takes the actor for lost (its node cut off, its process hung)."""
_RAY_EXTRA = "the Ray back-end needs Ray: pip install 'agentloop[ray]'"


class ClusterError(RuntimeError):
    """The cluster cannot be used (unreachable, no room for an actor, other code on a node)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClusterError(_RAY_EXTRA) from None
    return ray


def connect(address: str) -> bool:
    """Join the Ray cluster at `address` (auto, local, HOST:PORT) unless this process already
    has; whether this call connected (so closing the pool disconnects)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a cluster started here reports nothing out
    kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address != "local":
        _probe(address)  # Ray itself would retry an unreachable head for minutes
    if address == "local":  # a new instance, never one found on this machine
        kwargs["include_dashboard"] = False
    kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = "start one with `ray start --head`, or use --ray local" if address == "auto" else \
            "check the address (HOST:PORT of the head node) and that this machine can reach it"
        raise ClusterError(f"cannot join the Ray cluster at {address}: {first}; {hint}") from None
    return True


def _probe(address: str, within: float = 10.0) -> None:
    """ClusterError at once when nothing answers at the head node's address (HOST:PORT, or what
    auto stands for: RAY_ADDRESS, else the cluster `ray start` recorded on this machine)."""
    import socket

    target = address
    if address == "auto":
        target = os.environ.get("RAY_ADDRESS") or ""
        if not target:
            try:
                target = Path("/tmp/ray/ray_current_cluster").read_text().strip()
            except OSError:
                return  # Ray says itself that no cluster runs here
    host, _, port = target.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=within).close()
    except OSError as exc:
        hint = "start one with `ray start --head`, or use --ray local" if address == "auto" else \
            "check the address (HOST:PORT of the head node) and that this machine can reach it"
        raise ClusterError(f"cannot join the Ray cluster at {address}: nothing answers at {target} "
                           f"({exc.strerror or exc}); {hint}") from None


@dataclass(eq=False)
class _Actor:
    handle: Any
    info_ref: Any = None
    """The pending answer of its `info` call: ready once its workers have started."""
    info: dict[str, Any] = field(default_factory=dict)
    free: int = 0
    """Slots not running a stage now."""
    alive: bool = True

    @property
    def name(self) -> str:
        return f"actor {self.info.get('pid', '?')} on {self.info.get('host', '?')}"


class RayPool:
    """Evaluation actors on a Ray cluster; thread-safe, the runner's interface of `WorkerPool`.

    `device`: cpu or cuda. `address`: the cluster (see `connect`). `actors`: how many (default
    every GPU, or every `cpus_per_actor` CPUs, of the cluster). `workers_per_actor`: judge
    workers (slots) in each. `timing_device`: the device type benchmarks run on."""

    def __init__(self, device: Literal["cpu", "cuda"] = "cpu", address: str = "auto", *,
                 actors: int | None = None, workers_per_actor: int = 1, cpus_per_actor: float = 1.0,
                 timing_device: str | None = None, start_timeout: float = 300.0,
                 grow_every_s: float = 5.0) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"unknown device {device!r}; use cpu or cuda")
        self.ray = import_ray()
        self.device = device
        self.address = address
        self.workers_per_actor = workers_per_actor
        self.cpus_per_actor = cpus_per_actor
        self.start_timeout = start_timeout
        self.fixed = actors
        self._cond = threading.Condition()
        self._closed = False
        self._actors: list[_Actor] = []
        self._starting: list[_Actor] = []
        self._monitor: threading.Thread | None = None
        self._awaiting: list[threading.Thread] = []
        """Threads awaiting actors not placed yet (`_await`)."""
        self._affinity: OrderedDict[str, _Actor] = OrderedDict()
        self._busy: dict[int, tuple[_Actor, str, Stage]] = {}
        """What runs now, by calling thread: (actor, code hash, stage); for tests and status."""
        self.lost: list[str] = []
        """One line per actor lost (why, and the stage it was running)."""
        self.requeued = 0
        """Stages queued again after their actor was lost."""
        self._connected = connect(address)
        try:
            count = actors or self._capacity()
            if count < 1:
                unit = "GPU" if device == "cuda" else f"{cpus_per_actor:g} CPU"
                raise ClusterError(f"the Ray cluster at {address} has no {unit} free for an evaluation actor")
            self.size = count * workers_per_actor
            started = [self._spawn() for _ in range(count)]
            self._wait_first(started)
            names = Counter(a.info["device_name"] for a in self._actors)
            self.timing_device = timing_device or names.most_common(1)[0][0]
        except BaseException:
            self.terminate()
            raise
        self._monitor = threading.Thread(target=self._grow, args=(grow_every_s,), daemon=True,
                                         name="ray-pool-monitor")
        self._monitor.start()

    # Actors --------------------------------------------------------------------------------
    def _capacity(self) -> int:
        """Actors the cluster has room for now."""
        resources = self.ray.cluster_resources()
        if self.device == "cuda":
            return int(resources.get("GPU", 0))
        return int(math.floor(resources.get("CPU", 0) / self.cpus_per_actor + 1e-9))

    def _spawn(self) -> _Actor:
        """Start an actor (Ray places it once the cluster has room); it takes slots once its
        workers have started (`_await`)."""
        gpus = 1 if self.device == "cuda" else 0
        remote = self.ray.remote(EvaluationActor).options(
            num_cpus=self.cpus_per_actor, num_gpus=gpus, max_restarts=0,
            max_concurrency=self.workers_per_actor + 2)
        actor = _Actor(handle=remote.remote(self.device, self.workers_per_actor, self.start_timeout))
        actor.info_ref = actor.handle.info.remote()
        with self._cond:
            self._starting.append(actor)
        return actor

    def _wait_first(self, started: list[_Actor]) -> None:
        """Wait for the first actors (all that the cluster can place within the start time-out,
        at least one): their device names decide the timing device. The others join later."""
        deadline = time.monotonic() + self.start_timeout + 60
        pending = {a.info_ref: a for a in started}
        failures: list[str] = []
        while pending:
            wait = max(0.0, deadline - time.monotonic())
            if not wait and self._actors:
                break
            if not wait:
                raise ClusterError(f"no evaluation actor started on the Ray cluster at {self.address} within "
                                   f"{self.start_timeout + 60:g} s (each needs {self._request()}); "
                                   + (failures[0] if failures else "is there room for one?"))
            ready, _ = self.ray.wait(list(pending), num_returns=1, timeout=min(wait, 1.0))
            for ref in ready:
                actor = pending.pop(ref)
                problem = self._admit(actor, ref)
                if problem:
                    failures.append(problem)
        if not self._actors:
            raise ClusterError(f"no evaluation actor could start on the Ray cluster at {self.address}: "
                               f"{failures[0]}")
        for actor in pending.values():  # placed later: they join when ready
            self._await_later(actor)

    def _request(self) -> str:
        cpus = f"{self.cpus_per_actor:g} CPU"
        return f"1 GPU and {cpus}" if self.device == "cuda" else cpus

    def _admit(self, actor: _Actor, ref: Any) -> str | None:
        """An actor's `info` came back: let it take slots, or refuse it and say why."""
        try:
            info = self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - whatever stopped it, it takes no slots
            self._discard(actor)
            # Killed by close() while it waited to be placed: nothing went wrong with it.
            return None if self._closed else f"an actor could not start: {_first_line(exc)}"
        if info.get("code_version") != evaluation_code_version():
            self._discard(actor)
            return (f"the actor on {info.get('host')} runs other evaluating code (version "
                    f"{info.get('code_version')}, here {evaluation_code_version()}); install the same "
                    "agentloop on every node")
        with self._cond:
            if actor in self._starting:
                self._starting.remove(actor)
            if self._closed:
                self.ray.kill(actor.handle, no_restart=True)
                return None
            actor.info, actor.free = info, self.workers_per_actor
            self._actors.append(actor)
            self._cond.notify_all()
        log.info("evaluation %s ready: %s", actor.name, info["device_name"])
        return None

    def _discard(self, actor: _Actor) -> None:
        actor.alive = False
        with self._cond:
            if actor in self._starting:
                self._starting.remove(actor)
        try:
            self.ray.kill(actor.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def _await_later(self, actor: _Actor) -> None:
        """`_await` in a thread of its own, which `_kill_all` lets end before leaving the cluster."""
        thread = threading.Thread(target=self._await, args=(actor,), daemon=True)
        with self._cond:
            self._awaiting = [t for t in self._awaiting if t.is_alive()] + [thread]
        thread.start()

    def _await(self, actor: _Actor) -> None:
        """Wait, without end, for an actor the cluster has not placed yet (a replacement waits
        for a node to come back or join); then let it take slots."""
        while not self._closed:
            ready, _ = self.ray.wait([actor.info_ref], timeout=1.0)
            if ready:
                problem = self._admit(actor, actor.info_ref)
                if problem:
                    log.warning("%s", problem)
                return
        self._discard(actor)

    def _replace(self, actor: _Actor, why: str) -> None:
        """An actor was lost: kill it (in case it only hangs), and start another in its place."""
        with self._cond:
            if not actor.alive:
                return
            actor.alive = False
            if actor in self._actors:
                self._actors.remove(actor)
            for key in [k for k, a in self._affinity.items() if a is actor]:
                del self._affinity[key]
            self.lost.append(f"{actor.name}: {why}")
            closed = self._closed
        try:
            self.ray.kill(actor.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone with its node
            pass
        if closed:
            return
        log.warning("evaluation %s lost (%s); starting another", actor.name, why)
        self._await_later(self._spawn())

    def _grow(self, every: float) -> None:
        """Start actors on nodes that joined (unless the campaign fixed their number)."""
        while True:
            with self._cond:
                if self._cond.wait_for(lambda: self._closed, every):
                    return
                if self.fixed is not None or self._starting:
                    continue
                have = len(self._actors)
            try:
                room = self._capacity() - have
            except Exception:  # noqa: BLE001 - the cluster is unreachable for a moment
                continue
            for _ in range(max(0, room)):
                self._await_later(self._spawn())

    # Slots ---------------------------------------------------------------------------------
    def _acquire(self, key: str, stage: Stage) -> _Actor:
        """A free slot, on an actor of the timing device for a benchmark; preferably the actor
        that evaluated this candidate last (its runner may still hold it)."""
        def free() -> _Actor | None:
            eligible = [a for a in self._actors if a.free > 0 and
                        (stage != "benchmark" or a.info["device_name"] == self.timing_device)]
            if not eligible:
                return None
            last = self._affinity.get(key)
            return last if last in eligible else max(eligible, key=lambda a: a.free)

        with self._cond:
            self._cond.wait_for(lambda: self._closed or free() is not None)
            if self._closed:
                raise RuntimeError("the evaluation pool is closed")
            actor = free()
            actor.free -= 1
            self._affinity[key] = actor
            self._affinity.move_to_end(key)
            while len(self._affinity) > 4096:
                self._affinity.popitem(last=False)
            return actor

    def _release(self, actor: _Actor) -> None:
        with self._cond:
            actor.free += 1
            self._cond.notify_all()

    # Evaluation ----------------------------------------------------------------------------
    def evaluate_stage(self, code: str, task: Task, stage: Stage, settings: EvalSettings) -> StageOutcome:
        """Run one stage on one candidate on some actor, blocking until a slot is free (the
        static gate runs here). Never raises for anything the candidate does."""
        if settings.device != self.device:
            raise ValueError(f"settings.device is {settings.device} but this pool runs on {self.device}")
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
        if stage == "static":
            return static_outcome(code, task)
        key = code_hash(code)
        digest = task_digest(task)
        timeout = settings.stage_timeout_s.get(stage, default_stage_timeout(stage))
        answer_within = timeout + self.start_timeout + ANSWER_MARGIN_S
        lost: list[str] = []
        while True:
            actor = self._acquire(key, stage)
            me = threading.get_ident()
            self._busy[me] = (actor, key, stage)
            start = time.perf_counter()
            try:
                ref = actor.handle.evaluate_stage.remote(code, task.name, digest, stage,
                                                         settings.model_dump(mode="json"))
                data = self.ray.get(ref, timeout=answer_within)
            except Exception as exc:  # noqa: BLE001 - sorted below: a lost actor, or a node's error
                why = self._lost_reason(exc, answer_within)
                if why is None:
                    self._release(actor)
                    raise ClusterError(f"{stage} stage on {actor.name}: {_first_line(exc)}") from None
                self._replace(actor, f"{why} during the {stage} stage")
                if self._closed:
                    return _failed(stage, "the run was stopped", time.perf_counter() - start)
                lost.append(f"{actor.name} {why}")
                if len(lost) > REQUEUES:
                    error = (f"the evaluation actor was lost twice during the {stage} stage "
                             f"({'; '.join(lost)}); counted as the candidate's crash")
                    return _failed(stage, error, time.perf_counter() - start)
                with self._cond:
                    self.requeued += 1
                log.warning("%s stage of %s queued again on another actor", stage, key[:12])
                continue
            finally:
                self._busy.pop(me, None)
            self._release(actor)
            return StageOutcome.model_validate(data)

    def _lost_reason(self, exc: BaseException, waited: float) -> str | None:
        """Why an actor counts as lost after a failed call, or None when the call failed in a
        working actor (an error to raise)."""
        kinds = lambda *names: tuple(k for k in (getattr(self.ray.exceptions, n, None) for n in names) if k)
        if isinstance(exc, kinds("GetTimeoutError")):
            return f"did not answer within {waited:g} s"
        if isinstance(exc, kinds("NodeDiedError", "LocalRayletDiedError")):
            return "lost with its node"
        if isinstance(exc, kinds("RayActorError", "WorkerCrashedError", "ObjectLostError")):
            text = str(exc).lower()
            return "lost with its node" if "node" in text and "dead" in text else "died"
        return None

    def isolation(self) -> dict[str, Any]:
        """The cage candidates run in, as each actor's runners report it: the first actor's,
        with a note for every actor whose cage differs (a node whose kernel refuses namespaces,
        or with another memory limit); empty if no actor could say."""
        from gates.judge.isolation import describe_isolation

        with self._cond:
            if self._closed:
                raise RuntimeError("the pool is closed")
            actors = list(self._actors)
        asked = [(actor, actor.handle.isolation.remote()) for actor in actors]
        found = []
        for actor, ref in asked:
            try:
                found.append((actor, self.ray.get(ref, timeout=self.start_timeout + ANSWER_MARGIN_S)))
            except Exception:  # noqa: BLE001 - a lost or stopped actor says nothing
                continue
        if not found:
            return {}
        layers = lambda iso: {k: iso.get(k) for k in ("network", "files", "limits", "arena")}  # noqa: E731
        first = dict(found[0][1])
        differ = [f"{actor.name}: {describe_isolation(iso)}"
                  for actor, iso in found[1:] if layers(iso) != layers(first)]
        if differ:
            first["notes"] = [*first.get("notes", []), *differ]
        return first

    def busy(self) -> list[dict[str, Any]]:
        """The stages running now: actor pid, node, host, candidate hash, stage."""
        return [{"pid": a.info.get("pid"), "node": a.info.get("node"), "host": a.info.get("host"),
                 "hash": key, "stage": stage} for a, key, stage in list(self._busy.values())]

    def actors(self) -> list[dict[str, Any]]:
        """The info of every actor taking slots now."""
        with self._cond:
            return [dict(a.info) for a in self._actors]

    def describe(self) -> str:
        """One line: where evaluations run."""
        names = Counter(a["device_name"] for a in self.actors())
        kinds = ", ".join(f"{n} x {name}" for name, n in names.items())
        nodes = len({a["node"] for a in self.actors()})
        return (f"ray {self.address}: {sum(names.values())} actors ({kinds}) on {nodes} node(s), "
                f"{self.workers_per_actor} worker(s) each; benchmarks on {self.timing_device}")

    # Lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every actor after the stages running now have finished, and leave the cluster
        if this pool joined it."""
        with self._cond:
            if self._closed:
                return
            self._cond.wait_for(lambda: all(a.free == self.workers_per_actor for a in self._actors))
            self._closed = True
            self._cond.notify_all()
            actors, self._actors = list(self._actors), []
        refs = [a.handle.close.remote() for a in actors]
        try:
            self.ray.wait(refs, num_returns=len(refs), timeout=60)
        except Exception:  # noqa: BLE001 - an actor lost on the way out
            pass
        self._kill_all(actors)

    def terminate(self) -> None:
        """Kill every actor at once (an interrupted run): stages running now fail, callers waiting
        for a slot get RuntimeError."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            actors, self._actors = list(self._actors), []
        self._kill_all(actors)

    def _kill_all(self, actors: Sequence[_Actor]) -> None:
        with self._cond:
            starting, self._starting = list(self._starting), []
        for a in [*actors, *starting]:
            a.alive = False
            try:
                self.ray.kill(a.handle, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        if self._connected:
            self._connected = False
            # The pool's own threads end within a second of its closing; a Ray call of theirs after
            # ray.shutdown() would connect this process again, to the cluster that `ray start`
            # recorded on this machine, or abort it.
            deadline = time.monotonic() + 10
            if self._monitor is not None:
                self._monitor.join(deadline - time.monotonic())
            with self._cond:
                awaiting = list(self._awaiting)
            for thread in awaiting:
                thread.join(max(0.0, deadline - time.monotonic()))
            self.ray.shutdown()

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _failed(stage: Stage, error: str, seconds: float) -> StageOutcome:
    gate = None if stage == "benchmark" else \
        GateResult(gate=stage, passed=False, seconds=seconds, error=error)
    return StageOutcome(stage=stage, passed=False, seconds=seconds, gate=gate, error=error)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
