"""A judge's runners: the one holding the current candidate, parked ones for candidates that come
back, spares booting for the next; and `run_gate`, which runs one gate on a candidate in them."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from gates.judge.client import CandidateFailure, Runner, sandbox_finding
from gates.runner.loader import CandidateError
from gates.verdict import GateResult


class Runners:
    """The judge's runners: the one holding the current candidate, and spares booting for the
    next ones (so a new candidate does not wait for Python, torch and the cage)."""

    def __init__(self) -> None:
        self.current: Runner | None = None
        self.parked: list[Runner] = []
        """Runners that held a recent candidate, stopped (SIGSTOP) until it comes back, most
        recent first."""
        self.keep_held = 1
        """Runners holding a candidate, the current one included: with more than one, a
        candidate's next stage finds its runner (kernels compiled, first calls made) even when
        another candidate ran in between, as with several loops in flight."""
        self.spares: list[Runner] = []
        """Booted or booting, oldest first."""
        self.keep_spares = 0
        """Spares kept booting: each one taken is replaced at once (a pool's workers). On a GPU a
        runner boots in seconds (torch, the CUDA context, Triton's driver), and when stages of
        different candidates follow each other faster than that, one spare is not enough."""
        self.memory_bytes: int | None = None
        """Each runner's memory limit; None: half of physical memory."""
        self.device: str | None = None
        self.reference_dirs: list[str] = []
        self.loads = 0
        """Candidates loaded into fresh runners."""

    def _new(self) -> Runner:
        return Runner(self.device, reference_dirs=self.reference_dirs, memory_bytes=self.memory_bytes)

    def for_code(self, code: str, entry: str, device: str,
                 reference_dirs: list[str]) -> tuple[Runner, list[str]]:
        """The runner holding `code`: the current one, a parked one resumed, or a fresh one it
        is loaded into; also the torch settings its import changed (empty when it was loaded
        before)."""
        digest = hashlib.sha256(code.encode()).hexdigest()
        if self.current is not None and self.current.code_hash == digest and self.current.alive:
            return self.current, []
        if self.device != device or self.reference_dirs != reference_dirs:
            self.close()
            self.device, self.reference_dirs = device, list(reference_dirs)
        parked = next((r for r in self.parked if r.code_hash == digest), None)
        if parked is not None:
            self.parked.remove(parked)
        self._park_current()
        if parked is not None:
            if parked.resume():
                self.current = parked
                return parked, []
            parked.stop()
        runner = self.spares.pop(0) if self.spares else self._new()
        self.current = runner
        self.loads += 1
        while len(self.spares) < self.keep_spares:
            self.spares.append(self._new())
        return runner, runner.load(code, entry)

    def prestart(self, device: str, reference_dirs: list[str]) -> None:
        """Start the spares booting now (at least one), for the first candidates to come."""
        if not self.spares:
            self.device, self.reference_dirs = device, list(reference_dirs)
        while len(self.spares) < max(1, self.keep_spares):
            self.spares.append(self._new())

    def wait_spare(self) -> None:
        """Wait until the next spare has booted; one that cannot start is dropped (its
        candidate's stage then starts a runner of its own and says why it failed)."""
        if self.spares:
            try:
                self.spares[0].wait_ready()
            except Exception:  # noqa: BLE001
                self.spares.pop(0).stop()

    def _park_current(self) -> None:
        """Stop the current runner, or park it when runners are held for returning candidates
        (the least recent parked one beyond `keep_held` is stopped)."""
        runner, self.current = self.current, None
        if runner is None:
            return
        if self.keep_held < 2 or runner.code_hash is None:
            runner.stop()
            return
        try:
            runner.park()
            parked = runner.pause()
        except CandidateFailure:
            parked = False
        if not parked:
            runner.stop()
            return
        self.parked.insert(0, runner)
        while len(self.parked) > self.keep_held - 1:
            self.parked.pop().stop()

    def stop_current(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None

    def close(self) -> None:
        self.stop_current()
        while self.parked:
            self.parked.pop().stop()
        while self.spares:
            self.spares.pop().stop()


RUNNERS = Runners()


def reference_dirs(task: Any) -> list[str]:
    """What a runner must not read for this task: the task suite's directory."""
    return [str(task.tasks_dir.resolve())]


def run_gate(gate: str, code: str, task: Any, device: str, body: Any) -> GateResult:
    """Load `code` into this judge's runner and run `body(runner, import_changes)`, a gate on
    it; a candidate that does not load, or a runner that fails outside the gate's own handling,
    gives a failed result with the reason. The runner's findings are added at the end."""
    start = time.perf_counter()
    runner = None
    failed = lambda error, findings=(): GateResult(
        gate=gate, passed=False, error=error, findings=list(findings), seconds=time.perf_counter() - start)
    try:
        runner, changes = RUNNERS.for_code(code, task.entry, device, reference_dirs(task))
        result = body(runner, changes)
    except CandidateError as exc:
        result = failed(str(exc))
    except CandidateFailure as exc:
        rule = [sandbox_finding(exc.rule, exc.described)] if exc.rule else []
        result = failed(exc.described, rule)
    return finish(result, runner or RUNNERS.current)


def finish(result: GateResult, runner: Runner | None) -> GateResult:
    """The gate's result with the runner's findings added (any of them rejects)."""
    if runner is None:
        return result
    if runner.alive:
        runner.check_leftovers()
    found = runner.take_findings()
    if not found:
        return result
    findings = list(result.findings) + [f for f in found if f not in result.findings]
    return result.model_copy(update={"findings": findings, "passed": False})
