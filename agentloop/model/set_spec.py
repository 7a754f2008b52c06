"""Kernel sets by name: which kernel each task of a model runs, chosen from a string.

    eager                      each task's production baseline (vendor GEMM, SDPA, torch norms)
    compiled                   each task's reference under torch.compile
    reference                  each task's plain-PyTorch reference
    corpus                     the corpus kernels measured invariant on this device (manifest labels)
    run:DIR[:MODE]             a run's final kernels of MODE (bi-aware by default, or baseline, or
                               STYLE/MODE where a run has several styles), or `fastest-bi`: the
                               fastest accepted kernel that passed both batch-invariance gates
    archive[:FILE]             the kernel archive's fastest batch-invariant kernel per task
    files:DIR | files:T=PATH,… kernel files, one per task (DIR holds <task>.py)
    entry:T=pkg.mod:fn,…       an installed library's callable as a task's entry (as audit --entry)

`NAME=SPEC` names a set. A task the set lacks falls back to eager torch, and every choice says
where its kernel came from. Code from a run, the archive, files or a library is untrusted: the
model check runs it in caged runners (`agentloop.model.caged`), never in this process.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel

from agentloop.model.config import ModelInputError
from gates.contract import Task, TaskError, get_task

Kind = Literal["eager", "compiled", "reference", "code", "entry"]
RUN_MODES = ("baseline", "bi-aware", "fastest-bi")
TORCH_KINDS = ("eager", "compiled", "reference")
"""The kinds of op torch itself provides (`agentloop.model.kernel_sets.torch_ops`); the others
(`code`, `entry`) are kernels, which run caged."""


class KernelChoice(BaseModel):
    """One task's op in a set: what runs and where it came from."""

    task: str
    kind: Kind
    origin: str
    code: str | None = None
    """The kernel module's source (kind code), or the one-line import of a library entry."""
    verdicts: dict[str, Any] = {}
    """Each gate's verdict as recorded where the kernel came from."""
    speed: dict[str, Any] = {}
    """Its speed as recorded there (over the reference and the production baselines)."""


class KernelSetChoice(BaseModel):
    """A named set: one choice per task it covers (tasks it lacks run eager)."""

    name: str
    spec: str
    kernels: dict[str, KernelChoice]

    def choice(self, task: str) -> KernelChoice:
        return self.kernels.get(task) or KernelChoice(task=task, kind="eager",
                                                      origin="eager (not in the set)")


def _task(name: str, where: str) -> Task:
    try:
        return get_task(name)
    except TaskError:
        raise ModelInputError(f"{where}: unknown task {name!r} (see `agentloop tasks`)") from None


def _read_kernel(path: Path, task: Task) -> str:
    """The kernel file's source, checked to define the task's entry (one-line error if not)."""
    from gates.candidate import CandidateError
    from gates.source import read_candidate

    try:
        return read_candidate(path, task)
    except CandidateError as exc:
        raise ModelInputError(str(exc)) from None


def parse_set(spec: str, tasks: list[str], device: str) -> KernelSetChoice:
    """The set `spec` names, for the model's `tasks`; ModelInputError (one line) when it cannot be
    used (unknown kind or task, missing file or entry, a run without a kernel the model needs)."""
    name, _, body = spec.partition("=") if re.match(r"^[\w.-]+=", spec) else ("", "", spec)
    kind, _, arg = body.partition(":")
    name = name or body
    if kind in TORCH_KINDS:
        if arg:
            raise ModelInputError(f"kernel set {spec!r}: {kind} takes no argument")
        return KernelSetChoice(name=name, spec=spec, kernels={
            t: KernelChoice(task=t, kind=kind, origin=kind) for t in tasks})
    chosen = {"corpus": lambda: _corpus(tasks, device), "run": lambda: _run(arg, tasks, spec),
              "archive": lambda: _archive(arg, tasks, device, spec), "files": lambda: _files(arg, spec),
              "entry": lambda: _entries(arg, spec)}
    if kind not in chosen:
        raise ModelInputError(f"kernel set {spec!r}: unknown kind {kind!r} (eager, compiled, reference, "
                              f"corpus, run:DIR[:MODE], archive[:FILE], files:..., entry:...)")
    return KernelSetChoice(name=name, spec=spec, kernels=chosen[kind]())


def _corpus(tasks: list[str], device: str) -> dict[str, KernelChoice]:
    """Per task, the first corpus file measured invariant and correct on this device type."""
    key = "gpu" if device == "cuda" else "cpu"
    out = {}
    for name in tasks:
        task = get_task(name)
        folder = task.tasks_dir / name / "candidates"
        manifest = folder / "manifest.yaml"
        if not manifest.is_file():
            continue
        for entry in yaml.safe_load(manifest.read_text()).get("candidates", []):
            measured = entry.get(key) or {}
            if measured.get("label") == "invariant" and measured.get("correct") is not False:
                out[name] = KernelChoice(task=name, kind="code", code=(folder / entry["file"]).read_text(),
                                         origin=f"corpus {name}/{entry['file']}",
                                         verdicts={f"{key} label": "invariant",
                                                   "detail": measured.get("detail", "")})
                break
    return out


def _gate_verdicts(db: sqlite3.Connection, candidate: int) -> dict[str, Any]:
    verdicts = {}
    for gate, passed, findings in db.execute(
            "SELECT gate, passed, findings FROM gate_results WHERE candidate_id = ?", (candidate,)):
        rules = sorted({f.get("rule") for f in json.loads(findings or "[]") if f.get("severity") == "error"})
        verdicts[gate] = "pass" if passed else ("fail " + ",".join(r for r in rules if r)).strip()
    return verdicts


def _speed(db: sqlite3.Connection, code_hash: str, task: str) -> dict[str, Any]:
    """Speedups over the reference and the production baselines per benchmark shape, from the
    run's evaluation cache."""
    rows = db.execute("SELECT result FROM evaluations WHERE hash = ? AND task = ?", (code_hash, task))
    for (result,) in rows:
        bench = (json.loads(result).get("benchmark") or {}).get("benchmark")
        if bench:
            return {"device": bench.get("device_name"), "dtype": bench.get("dtype"),
                    "speedup_vs_reference": bench.get("speedup"),
                    "speedup_vs_production": bench.get("production_speedup"),
                    "shapes": [_shape_speed(s) for s in bench.get("shapes", [])]}
    return {}


def _shape_speed(s: dict[str, Any]) -> dict[str, Any]:
    return {"dims": s.get("dims"), "candidate_ms": (s.get("candidate") or {}).get("median_ms"),
            "reference_ms": (s.get("reference") or {}).get("median_ms"),
            "baselines_ms": {n: t.get("median_ms") for n, t in (s.get("baselines") or {}).items()}}


def _run(arg: str, tasks: list[str], spec: str) -> dict[str, KernelChoice]:
    path, mode = arg, "bi-aware"
    head, _, tail = arg.rpartition(":")
    if head and (tail in RUN_MODES or "/" in tail and tail.split("/")[-1] in RUN_MODES[:2]):
        path, mode = head, tail
    run_dir = Path(path)
    db_file = run_dir / "results.sqlite"
    if not db_file.is_file():
        raise ModelInputError(f"kernel set {spec!r}: {run_dir} is not a run directory (no results.sqlite)")
    # Read only, but not `mode=ro`: a read-only connection to a WAL database leaves its -wal and
    # -shm files behind when it closes; this one removes them (unless another still reads).
    db = sqlite3.connect(db_file)
    db.execute("PRAGMA query_only=ON")
    try:
        rows = _run_rows(db, mode, spec)
        out = {}
        for name in tasks:
            row = rows.get(name)
            if row is None:
                if mode == "fastest-bi":
                    raise ModelInputError(f"kernel set {spec!r}: the run has no batch-invariant kernel for "
                                          f"{name}, which the model needs")
                continue
            cid, code, code_hash, cell = row
            out[name] = KernelChoice(task=name, kind="code", code=code,
                                     origin=f"run {run_dir} {cell} candidate {cid}",
                                     verdicts=_gate_verdicts(db, cid), speed=_speed(db, code_hash, name))
        return out
    finally:
        db.close()


def _run_rows(db: sqlite3.Connection, mode: str, spec: str) -> dict[str, tuple]:
    if mode == "fastest-bi":
        rows = db.execute("SELECT task, id, code, hash, cell FROM candidates WHERE status = 'accepted' AND "
                          "code IS NOT NULL AND bi_dynamic = 1 AND COALESCE(bi_static, 1) = 1 "
                          "ORDER BY speedup DESC, id").fetchall()
        out: dict[str, tuple] = {}
        for task, *rest in rows:
            out.setdefault(task, tuple(rest))
        return out
    style, _, mode_name = mode.rpartition("/")
    sql = ("SELECT t.task, c.id, c.code, c.hash, t.cell FROM task_results t JOIN candidates c "
           "ON c.id = t.final_candidate WHERE t.mode = ? AND c.code IS NOT NULL")
    params = [mode_name]
    if style:
        sql, params = sql + " AND t.style = ?", [*params, style]
    rows = db.execute(sql + " ORDER BY t.cell", params).fetchall()
    cells = sorted({r[4] for r in rows})
    if len(cells) > 1:
        raise ModelInputError(f"kernel set {spec!r}: the run has several {mode_name} cells "
                              f"({', '.join(cells)}); name one as run:DIR:STYLE/{mode_name}")
    return {task: tuple(rest) for task, *rest in rows}


def _archive(arg: str, tasks: list[str], device: str, spec: str) -> dict[str, KernelChoice]:
    from agentloop.results.archive import ARCHIVE, Archive

    path = Path(arg or Path("runs") / ARCHIVE)
    if not path.is_file():
        raise ModelInputError(f"kernel set {spec!r}: no kernel archive at {path}")
    archive = Archive(path)
    out = {}
    for name in tasks:
        best = archive.best(name, "bi-aware", device, limit=1)
        if best:
            k = best[0]
            out[name] = KernelChoice(task=name, kind="code", code=k.code,
                                     origin=f"archive {path} kernel {k.id}",
                                     verdicts={"static": "pass", "dynamic": "pass"},
                                     speed={"device": k.device_name, "speedup_vs_reference": k.speedup,
                                            "speedup_vs_production": k.production_speedup})
    return out


def _files(arg: str, spec: str) -> dict[str, KernelChoice]:
    if not arg:
        raise ModelInputError(f"kernel set {spec!r}: files: needs a directory or TASK=PATH,...")
    pairs: list[tuple[str, Path]]
    if "=" in arg:
        pairs = [(t.strip(), Path(p.strip())) for t, _, p in (x.partition("=") for x in arg.split(","))]
    else:
        folder = Path(arg)
        if not folder.is_dir():
            raise ModelInputError(f"kernel set {spec!r}: {folder} is not a directory")
        pairs = [(p.stem, p) for p in sorted(folder.glob("*.py"))]
    out = {}
    for name, path in pairs:
        task = _task(name, f"kernel set {spec!r}")
        out[name] = KernelChoice(task=name, kind="code", code=_read_kernel(path, task), origin=f"file {path}")
    return out


def _entries(arg: str, spec: str) -> dict[str, KernelChoice]:
    from gates.candidate import CandidateError
    from gates.library import resolve_entry

    out = {}
    for item in filter(None, (x.strip() for x in arg.split(","))):
        name, _, entry = item.partition("=")
        task = _task(name, f"kernel set {spec!r}")
        try:
            resolved = resolve_entry(entry, task)
        except CandidateError as exc:
            raise ModelInputError(str(exc)) from None
        out[name] = KernelChoice(task=name, kind="entry", code=resolved.code, origin=f"entry {entry}")
    return out
