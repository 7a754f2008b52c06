"""The kernel archive: every accepted kernel of every run that records into it, across runs, and
the campaign key that starts loops from its best kernels.

One SQLite file (`archive.sqlite` beside the run directory by default, so `runs/archive.sqlite`
for runs under `runs/`), through the results store's own access layer. Each accepted kernel is a
row: task, device and device name, dtype, mode, style, provider, run directory, its verdicts,
its speedups over the reference and the production baselines, and its per-shape times.

Seeding (`archive: {seed_kernels: N}`): when a run starts, each loop is given the archive's N best
kernels for its task and mode (fastest over the reference on the campaign's device, distinct
sources, never the run's own); the choice is saved in the run directory (`seeds.json`), so a
resumed run seeds its loops alike whatever the archive has gained since. The loop evaluates them
as its first candidates, like any other candidate, before it asks the LLM for one (they do not
count against `budget.iterations`): refine then continues from the best, evolve's first
population is made of them, the team's planner and coder see them.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentloop.results.store import Store

ARCHIVE = "archive.sqlite"
SEEDS = "seeds.json"

SCHEMA = """
CREATE TABLE IF NOT EXISTS kernels (
    id INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    device TEXT NOT NULL,            -- cpu | cuda
    device_name TEXT NOT NULL,       -- as the benchmark saw it, e.g. "NVIDIA H200"
    dtype TEXT NOT NULL,             -- the benchmark's dtype
    mode TEXT NOT NULL,              -- baseline | bi-aware
    style TEXT NOT NULL,
    provider TEXT NOT NULL,
    campaign TEXT NOT NULL,
    run_dir TEXT NOT NULL,           -- resolved path of the run directory
    cell TEXT NOT NULL,
    iteration INTEGER NOT NULL,      -- the candidate's number in its loop
    hash TEXT NOT NULL,              -- sha256 of the code
    code TEXT NOT NULL,
    bi_static INTEGER,
    bi_dynamic INTEGER,
    speedup REAL NOT NULL,           -- geomean over the reference
    production_speedup REAL,         -- geomean over the fastest production baseline per shape
    shapes TEXT NOT NULL,            -- JSON: [{dims, candidate_ms, reference_ms, baselines: {name: ms}}]
    created_at REAL NOT NULL,
    UNIQUE (run_dir, cell, task, iteration)
);
CREATE INDEX IF NOT EXISTS kernels_task ON kernels(task, mode, device);
"""


class ArchiveOptions(BaseModel):
    """The kernel archive (agentloop/results/archive.py): where this run's accepted kernels are added, and
    whether loops start from the archive's best."""

    model_config = ConfigDict(extra="forbid")
    path: str | None = None
    """The archive file; default `archive.sqlite` beside the run directory (`runs/archive.sqlite`
    for `runs/<name>`)."""
    record: bool = True
    """Add every kernel this run accepts to the archive."""
    seed_kernels: int = Field(default=0, ge=0)
    """Start each loop from this many of the archive's best kernels for its task and mode (on the
    campaign's device), evaluated as its first candidates before the LLM is asked; 0: none."""
    device_name: str | None = None
    """Seed only from kernels benchmarked on this device name (e.g. "NVIDIA H200"); default any
    device of the campaign's type."""

    def file(self, run_dir: Path) -> Path:
        return Path(self.path) if self.path else Path(run_dir).resolve().parent / ARCHIVE


class ArchivedKernel(BaseModel):
    """One archived kernel, as a loop is seeded with it."""

    id: int
    archive: str
    task: str
    mode: str
    device_name: str
    speedup: float
    production_speedup: float | None = None
    code: str
    run_dir: str


class Archive(Store):
    """Thread-safe access to one archive file."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, SCHEMA)

    def add(self, row: dict[str, Any]) -> None:
        """Archive one accepted, benchmarked kernel: a row of the `kernels` table without its id and
        time (again after a resume: one row per candidate)."""
        with self._lock:
            if self.query("SELECT 1 FROM kernels WHERE run_dir = ? AND cell = ? AND task = ? "
                          "AND iteration = ?", row["run_dir"], row["cell"], row["task"], row["iteration"]):
                return
            self._insert("kernels", {**row, "created_at": time.time()})

    def best(self, task: str, mode: str, device: str, *, limit: int, device_name: str | None = None,
             exclude_run: Path | None = None) -> list[ArchivedKernel]:
        """The `limit` fastest distinct kernels for a task and mode on a device, fastest first
        (each source at its best measurement); in bi-aware mode only kernels through both BI gates."""
        sql = "SELECT * FROM kernels WHERE task = ? AND mode = ? AND device = ?"
        params: list[Any] = [task, mode, device]
        if device_name is not None:
            sql, params = sql + " AND device_name = ?", [*params, device_name]
        if exclude_run is not None:
            sql, params = sql + " AND run_dir != ?", [*params, str(exclude_run)]
        if mode == "bi-aware":
            sql += " AND bi_static = 1 AND bi_dynamic = 1"
        chosen: dict[str, dict[str, Any]] = {}
        for row in self.query(sql + " ORDER BY speedup DESC, id", *params):
            chosen.setdefault(row["hash"], row)
        return [ArchivedKernel(archive=str(self.path), **{k: row[k] for k in ArchivedKernel.model_fields
                                                          if k != "archive"})
                for row in list(chosen.values())[:limit]]


_OPEN: dict[str, Archive] = {}
_OPEN_LOCK = threading.Lock()


def open_archive(path: Path) -> Archive:
    """One Archive per file in this process (loops share it)."""
    key = str(Path(path).resolve())
    with _OPEN_LOCK:
        if key not in _OPEN:
            _OPEN[key] = Archive(path)
        return _OPEN[key]


def loop_seeds(options: ArchiveOptions, run_dir: Path, device: str, loop: str, task: str,
               mode: str) -> list[ArchivedKernel]:
    """The archived kernels a loop starts from: as saved in `run_dir/seeds.json` when the run
    chose them before, else chosen now from the archive (and saved)."""
    if options.seed_kernels == 0:
        return []
    saved_file = Path(run_dir) / SEEDS
    with _OPEN_LOCK:
        saved = json.loads(saved_file.read_text()) if saved_file.is_file() else {}
    if loop in saved:
        return [ArchivedKernel.model_validate(k) for k in saved[loop]]
    path = options.file(run_dir)
    chosen = open_archive(path).best(task, mode, device, limit=options.seed_kernels,
                                     device_name=options.device_name,
                                     exclude_run=Path(run_dir).resolve()) if path.is_file() else []
    with _OPEN_LOCK:
        saved = json.loads(saved_file.read_text()) if saved_file.is_file() else {}
        saved[loop] = [k.model_dump() for k in chosen]
        saved_file.write_text(json.dumps(saved, indent=1) + "\n")
    return chosen
