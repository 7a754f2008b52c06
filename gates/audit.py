"""The gates' public API: audit one candidate file against one task and get a Verdict.

The static gate reads the source in this process; every gate that runs candidate code
(dynamic, correctness with anti-cheat) runs in a judge worker process (`gates.judge.sandbox`), which
runs the candidate in a caged runner of its own (`gates.judge.client`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gates.candidate import CandidateError
from gates.contract import Task
from gates.feedback import render
from gates.judge.environment import redact
from gates.judge.sandbox import Job, Sandbox
from gates.library import IMPORT_FAILED, LibraryEntry
from gates.library import static_result as library_static
from gates.source import read_candidate, static_result
from gates.verdict import GateResult, Verdict

GATES = ("static", "dynamic", "correctness")
JOBS = {"dynamic": "gates.dynamic:dynamic_job", "correctness": "gates.correctness:correctness_job"}
DEFAULT_TIMEOUT = {"cpu": 300.0, "cuda": 120.0}
"""Seconds one gate may run a candidate, by device (the CPU interpreter is slow)."""


def default_device() -> str:
    """cuda when a GPU is visible, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def audit(candidate: str | Path | LibraryEntry, task: Task, gates: Sequence[str] | None = None,
          device: str | None = None, timeout: float | None = None, sandbox: Sandbox | None = None) -> Verdict:
    """Run the named gates (default all) on one candidate file, or on an installed library's
    callable (a `LibraryEntry`, `gates.library`), and return the Verdict.

    Raises CandidateError for a file that cannot be audited at all (missing, syntax error, no
    entry function) or a library entry whose module does not import in the runner, and
    ValueError for an unknown gate. `sandbox` reuses a running worker (its device wins);
    otherwise one is started for this call and stopped after it.
    """
    start = time.perf_counter()
    wanted = list(gates) if gates else list(GATES)
    unknown = [g for g in wanted if g not in GATES]
    if unknown:
        raise ValueError(f"unknown gate {unknown[0]!r}; gates are {', '.join(GATES)}")
    library = candidate if isinstance(candidate, LibraryEntry) else None
    if library is None:
        candidate = Path(candidate)
        source = read_candidate(candidate, task)
    else:
        source = library.code
    device = sandbox.device if sandbox else (device or default_device())
    timeout = timeout or DEFAULT_TIMEOUT["cpu" if device == "cpu" else "cuda"]
    own = None
    if sandbox is None and any(g in JOBS for g in wanted):
        own = sandbox = Sandbox(device)  # starts booting while the static gate runs
    results, isolation = [], None
    try:
        for gate in (g for g in GATES if g in wanted):
            if gate == "static":
                results.append(library_static(library, task) if library else
                               static_result(source, task, candidate))
                continue
            job = Job(JOBS[gate], {"code": source, "task": task, "device": sandbox.device})
            outcome = sandbox.run(job, timeout)
            if outcome.ok and isinstance(outcome.value, GateResult):
                results.append(outcome.value)
            else:
                results.append(GateResult(gate=gate, passed=False, seconds=outcome.seconds,
                                          error=outcome.error or "the gate returned no result"))
            error = results[-1].error or ""
            if library and error.startswith(IMPORT_FAILED):  # the input is unusable, not rejected
                raise CandidateError(f"--entry {library.spec}: {error}")
        if sandbox is not None and any(g in JOBS for g in wanted):
            said = sandbox.run(Job("gates.judge.isolation:runner_isolation", {}), 60)
            isolation = said.value if said.ok and isinstance(said.value, dict) else None
    finally:
        if own:
            own.close()
    verdict = Verdict(task=task.name, candidate=str(candidate), seconds=time.perf_counter() - start,
                      verdict="accept" if all(r.passed for r in results) else "reject", gates=results,
                      isolation=isolation)
    verdict.feedback = render(verdict, task, device)
    return verdict


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    """The verdict in the JSON shape of SPEC.md §3."""
    gates = []
    for g in verdict.gates:
        entry: dict[str, Any] = {"gate": g.gate, "passed": g.passed, "seconds": round(g.seconds, 3),
                                 "findings": [f.model_dump() for f in g.findings]}
        if g.counterexample:
            entry["counterexample"] = g.counterexample.model_dump()
        if g.error:
            entry["error"] = g.error
        gates.append(entry)
    out = {"task": verdict.task, "candidate": verdict.candidate, "verdict": verdict.verdict,
           "seconds": round(verdict.seconds, 3), "gates": gates}
    if verdict.isolation is not None:
        out["isolation"] = verdict.isolation
    return json.loads(redact(json.dumps(out)))  # a key the candidate found never leaves in a report
