"""The gates' public API: audit one candidate file against one task and get a Verdict.

The static gate reads the source in this process; every gate that runs candidate code
(dynamic, correctness with anti-cheat) runs in a judge worker process (`gates.judge.sandbox`), which
runs the candidate in a caged runner of its own (`gates.judge.client`).
"""

from __future__ import annotations

import json
import os
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gates.candidate import CandidateError
from gates.contract import Task
from gates.feedback import render
from gates.judge.environment import redact
from gates.judge.sandbox import Job, Sandbox, report_progress
from gates.library import IMPORT_FAILED, LibraryEntry
from gates.library import static_result as library_static
from gates.plan import batch_sizes, beyond_sizes, gate_dtypes
from gates.source import read_candidate, static_result
from gates.verdict import GateResult, Verdict

GATES = ("static", "dynamic", "correctness")
JOBS = {"dynamic": "gates.audit:dynamic_progress_job", "correctness": "gates.correctness:correctness_job"}
DEFAULT_TIMEOUT = {"cpu": 180.0, "cuda": 120.0}
"""Seconds one gate may run a candidate, by device. CPU: measured with `agentloop audit --device
cpu` on this 2-core machine, the slowest honest corpus kernel is decode_attention's
fixed_chunk_split_kv.py: its dynamic gate took 32 s alone and 111 s with the cores shared with
other work (correctness 3-12 s); the next slowest are grouped_decode.py (47 s, loaded) and
moe_topk_softmax's row_per_program.py (17 s); linear and token_logprobs at most 11 s. 180 s is
about 1.6x the slowest loaded run (5.6x the unloaded one): an honest kernel is not timed out on
a busy machine, and a hang costs three minutes, not five (`agentloop audit` also stops at the
first gate that times out)."""
CPU_NOTE = "cpu interpreter: not a GPU verdict"
"""What a verdict measured on the CPU says of itself: Triton's interpreter runs the kernel (tl.dot
rounds by a row's tile position there, atomics run one at a time, bf16 hides one-ulp changes)."""
UNSUPPORTED = ("not supported in interpreter mode", "interpreter does not support")
"""How Triton's interpreter says it cannot run a construct (inline asm, extern elementwise)."""
CONDEMNING = ("SB", "AC")
"""Rule families whose error ends an audit: the candidate tried to leave its cage or to cheat
(sandbox, anti-cheat), so no later gate can make it acceptable and running them only spends the
judge's time on it (`--all-gates` runs them anyway)."""
SKIPPED = "skipped: "
"""How a gate result that was not run begins its error (`skipped_gates`)."""
_CONDEMNED: weakref.WeakKeyDictionary[Sandbox, tuple[str, str]] = weakref.WeakKeyDictionary()
"""(the candidate's code, why it was condemned) of the last candidate a sandbox's gate condemned,
for the next `audit` call of the same candidate on the same sandbox (`agentloop audit` runs one
gate per call; a sandbox reused for another candidate skips nothing)."""


def condemned(result: GateResult) -> str | None:
    """Why a gate's result ends the audit: its first sandbox or anti-cheat error finding."""
    for f in result.findings:
        if f.severity == "error" and f.rule.startswith(CONDEMNING):
            return f"the {result.gate} gate rejected the candidate with {f.rule} ({f.message[:160]})"
    return None


def skipped_result(gate: str, why: str) -> GateResult:
    """A gate not run because an earlier one condemned the candidate: not passed, and says why."""
    return GateResult(gate=gate, passed=False, error=f"{SKIPPED}{why}; run with --all-gates to run it anyway")


def skipped_gates(verdict: Verdict) -> list[dict[str, str]]:
    """The gates an audit did not run, and why (the `skipped` list of `audit --json`)."""
    return [{"gate": g.gate, "why": g.error[len(SKIPPED):]} for g in verdict.gates
            if (g.error or "").startswith(SKIPPED)]


def sweep_seed() -> int:
    """A fresh seed for the batch sizes beyond the sweep (`gates.plan.beyond_sizes`): drawn per
    audit, so a candidate cannot know in advance where the sweep ends."""
    return int.from_bytes(os.urandom(4), "little")


class CannotCheckHere(CandidateError):
    """The candidate uses what this device cannot run (Triton's CPU interpreter): no verdict."""


def _range_text(values: list[int]) -> str:
    values = sorted(set(values))
    if len(values) <= 4:
        return ",".join(map(str, values))
    return f"{values[0]}-{values[-1]} ({len(values)} sizes)"


def coverage(gate: str, task: Task, device: str, sweep: int | None = None) -> str | None:
    """What a gate sweeps for this task on this device, compact: the dynamic gate's batch sizes
    (with those drawn beyond the sweep from `sweep`, the audit's sweep seed) and dtypes
    (`gates.plan`), the correctness gate's shapes, dtypes and seeds
    (`gates.correctness.correctness_gate`)."""
    if gate == "dynamic":
        beyond = "" if sweep is None else \
            f" + {','.join(map(str, beyond_sizes(task, device, sweep)))} beyond (sweep seed {sweep})"
        dtypes = "+".join(gate_dtypes(task, device))
        return f"batch {_range_text(batch_sizes(task, device))}{beyond}, {dtypes}"
    if gate == "correctness":
        shapes = task.shapes_for(device)
        sizes = [s[task.batch_axis] for s in shapes if task.batch_axis in s]
        seeds = 2 if device == "cpu" else 3
        return (f"{len(shapes)} shape{'s' * (len(shapes) != 1)}"
                + (f" ({task.batch_axis}={_range_text(sizes)})" if sizes else "")
                + f", {'+'.join(task.dtypes)}, {seeds} seeds")
    return None


def dynamic_progress_job(code: str, task: Task, device: str, seed: int = 0,
                         sweep_seed: int | None = None) -> GateResult:
    """`gates.dynamic.dynamic_job`, telling the parent each call's batch size
    (`gates.judge.sandbox.report_progress`) for `agentloop audit`'s status line."""
    from gates.dynamic import dynamic_gate
    from gates.judge.client import RemoteEntry
    from gates.judge.runner_pool import run_gate

    where = [a.name for a in task.args].index(task.batched_args[0]) if task.batched_args else None

    def body(runner: object, _: object) -> GateResult:
        entry, calls = RemoteEntry(runner), [0]

        def traced(*args: object) -> object:
            calls[0] += 1
            size = getattr(args[where], "shape", None) if where is not None and where < len(args) else None
            report_progress(f"call {calls[0]}" + (f", batch {size[0]}" if size else ""))
            return entry(*args)

        return dynamic_gate(traced, task, device, seed=seed, sweep_seed=sweep_seed)

    return run_gate("dynamic", code, task, device, body)


def unsupported_here(error: str, device: str, library: bool) -> bool:
    """Whether a gate's error says the device cannot run the candidate, rather than that the
    candidate is wrong: Triton's CPU interpreter lacking a construct (for a library's kernel,
    also any failure raised inside the interpreter itself)."""
    if device != "cpu":
        return False
    return any(u in error for u in UNSUPPORTED) or (library and "runtime/interpreter.py" in error)


def default_device() -> str:
    """cuda when a GPU is visible, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def audit(candidate: str | Path | LibraryEntry, task: Task, gates: Sequence[str] | None = None,
          device: str | None = None, timeout: float | None = None, sandbox: Sandbox | None = None,
          progress: Callable[[str, str], None] | None = None, all_gates: bool = False,
          sweep: int | None = None) -> Verdict:
    """Run the named gates (default all) on one candidate file, or on an installed library's
    callable (a `LibraryEntry`, `gates.library`), and return the Verdict.

    Raises CandidateError for a file that cannot be audited at all (missing, a directory, syntax
    error, no entry function) or a library entry whose module does not import in the runner;
    CannotCheckHere (a CandidateError) when Triton's CPU interpreter cannot run the kernel; and
    ValueError for an unknown gate. `sandbox` reuses a running worker (its device wins);
    otherwise one is started for this call and stopped after it. A candidate file that fails to
    import is rejected at the first gate that loads it (the later gates are not run).
    `progress(gate, line)` is called as a gate reports where it is (e.g. the dynamic gate's batch).
    Once a gate rejects the candidate with a sandbox (SB) or anti-cheat (AC) error, the later gates
    (also those of later calls on the same `sandbox`) are skipped: their results say so
    (`skipped_gates`); `all_gates` runs them anyway. `sweep` is the seed of the dynamic gate's
    batch sizes beyond the sweep (default: a fresh one, `sweep_seed`), named in its coverage.
    """
    start = time.perf_counter()
    wanted = list(gates) if gates else list(GATES)
    unknown = [g for g in wanted if g not in GATES]
    if unknown:
        raise ValueError(f"unknown gate {unknown[0]!r}; gates are {', '.join(GATES)}")
    library = candidate if isinstance(candidate, LibraryEntry) else None
    if library is None:
        candidate = Path(candidate)
        if candidate.is_dir():
            raise CandidateError(f"{candidate}: is a directory, expected a .py file")
        source = read_candidate(candidate, task)
    else:
        source = library.code
    device = sandbox.device if sandbox else (device or default_device())
    timeout = timeout or DEFAULT_TIMEOUT["cpu" if device == "cpu" else "cuda"]
    own = None
    if sandbox is None and any(g in JOBS for g in wanted):
        own = sandbox = Sandbox(device)  # starts booting while the static gate runs
    results, isolation = [], None
    sweep = sweep_seed() if sweep is None else sweep
    earlier = None if all_gates or sandbox is None else _CONDEMNED.get(sandbox)
    why = earlier[1] if earlier is not None and earlier[0] == source else None
    ran_candidate = False
    try:
        for gate in (g for g in GATES if g in wanted):
            if why is not None and gate != "static":
                results.append(skipped_result(gate, why))
                continue
            if gate == "static":
                results.append(library_static(library, task) if library else
                               static_result(source, task, candidate))
                continue
            args = {"code": source, "task": task, "device": sandbox.device}
            if gate == "dynamic":
                args["sweep_seed"] = sweep
            job = Job(JOBS[gate], args)
            ran_candidate = True
            said = (lambda line, gate=gate: progress(gate, line)) if progress else None
            outcome = sandbox.run(job, timeout, progress=said)
            if outcome.ok and isinstance(outcome.value, GateResult):
                result = outcome.value
            else:
                result = GateResult(gate=gate, passed=False, seconds=outcome.seconds,
                                    error=outcome.error or "the gate returned no result")
            error = result.error or ""
            if error.startswith("timed out after"):
                # The worker gives up a little before the limit, to answer in time: the gate used
                # its whole limit, and says so in both places.
                result = result.model_copy(update={"seconds": timeout})
            if library is None and error:  # the runner loads the code as candidate.py: name the file
                error = error.replace("(at candidate.py line", f"(at {candidate.name} line")
                result = result.model_copy(update={"error": error})
            # What the gate swept: its plan, when it ran the candidate through it (to the end or to
            # the first finding); none when it could not run the candidate at all.
            swept = None if result.error else coverage(gate, task, sandbox.device, sweep)
            results.append(result.model_copy(update={"coverage": swept}))
            if not all_gates and why is None and (why := condemned(result)) is not None:
                _CONDEMNED[sandbox] = (source, why)
            if unsupported_here(error, sandbox.device, library is not None):
                what = library.spec if library else str(candidate)
                raise CannotCheckHere(f"{what}: cannot be checked here (the CPU interpreter does not "
                                      f"support what the kernel uses: {error}); audit it on a GPU")
            if library and error.startswith(IMPORT_FAILED):  # the input is unusable, not rejected
                raise CandidateError(f"--entry {library.spec}: {error}")
            if error.startswith(IMPORT_FAILED):
                break  # every later gate would load it again and fail the same way
        if sandbox is not None and ran_candidate:
            said = sandbox.run(Job("gates.judge.isolation:runner_isolation", {}), 60)
            isolation = said.value if said.ok and isinstance(said.value, dict) else None
    finally:
        if own:
            own.close()
    verdict = Verdict(task=task.name, candidate=str(candidate), seconds=time.perf_counter() - start,
                      verdict="accept" if all(r.passed for r in results) else "reject", gates=results,
                      isolation=isolation, device=device)
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
        if g.coverage:
            entry["coverage"] = g.coverage
        gates.append(entry)
    out = {"task": verdict.task, "candidate": verdict.candidate, "verdict": verdict.verdict,
           "seconds": round(verdict.seconds, 3), "device": verdict.device,
           "coverage": {g.gate: g.coverage for g in verdict.gates if g.coverage}, "gates": gates}
    skipped = skipped_gates(verdict)
    if skipped:
        out["skipped"] = skipped
    if verdict.device == "cpu":
        out["note"] = CPU_NOTE
    if verdict.isolation is not None:
        out["isolation"] = verdict.isolation
    return json.loads(redact(json.dumps(out)))  # a key the candidate found never leaves in a report

