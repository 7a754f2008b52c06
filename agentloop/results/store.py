"""The results database of a run (`DIR/results.sqlite`): every candidate, gate verdict, timing,
LLM exchange, the evaluation cache, and the final result of each (cell, task).

One writer at a time (the campaign runner's thread holds a lock); WAL mode so reports can read
while a campaign writes. Every write commits at once, so a killed run loses nothing written.
SQLite removes the `-wal` and `-shm` files beside the database when its last connection closes
(a connection of another process that still reads keeps them, and the last one to close removes
them), so every store is closed: by its owner (`close()`, or `with Store(...)`), else when it is
garbage-collected or this process exits; after a clean exit only the database file is left.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY,
    cell TEXT NOT NULL,              -- "style/mode/provider"
    task TEXT NOT NULL,
    style TEXT NOT NULL,
    mode TEXT NOT NULL,
    provider TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    parent INTEGER,                  -- candidates.id this one was derived from
    hash TEXT NOT NULL,              -- sha256 of the code
    code TEXT,                       -- NULL when the answer held no code
    status TEXT NOT NULL,            -- accepted | rejected
    rejected_by TEXT,                -- the stage that rejected it (compile, static, dynamic, ...)
    rule TEXT,                       -- the first error finding's rule id, if any
    correct INTEGER,
    bi_static INTEGER,
    bi_dynamic INTEGER,
    speedup REAL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS candidates_cell ON candidates(cell, task);
CREATE TABLE IF NOT EXISTS gate_results (
    candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    gate TEXT NOT NULL,
    passed INTEGER NOT NULL,
    enforced INTEGER NOT NULL,       -- 0 when the gate only observed (baseline mode)
    seconds REAL NOT NULL,
    findings TEXT NOT NULL,          -- JSON list of gates.verdict.Finding
    counterexample TEXT,             -- JSON gates.verdict.Counterexample
    error TEXT
);
CREATE TABLE IF NOT EXISTS timings (
    candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    shape TEXT NOT NULL,             -- JSON dims
    candidate_median REAL,
    reference_median REAL,
    speedup REAL
);
CREATE TABLE IF NOT EXISTS evaluations (   -- the evaluation cache
    key TEXT PRIMARY KEY,            -- hash of (code hash, task, device, settings)
    hash TEXT NOT NULL,
    task TEXT NOT NULL,
    device TEXT NOT NULL,
    result TEXT NOT NULL,            -- JSON of the evaluation
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS exchanges (
    id INTEGER PRIMARY KEY,
    cell TEXT NOT NULL,
    task TEXT NOT NULL,
    role TEXT NOT NULL,              -- coder, planner, reviewer, ...
    request_hash TEXT NOT NULL,
    request TEXT NOT NULL,           -- JSON list of messages
    response TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    latency_s REAL NOT NULL,
    cost_usd REAL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS exchanges_request ON exchanges(cell, task, request_hash);
CREATE TABLE IF NOT EXISTS seeded (    -- candidates that came from the kernel archive, not an LLM
    candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    archive TEXT NOT NULL,           -- the archive file
    archive_id INTEGER NOT NULL,     -- its kernels.id there
    archived_speedup REAL            -- its speedup when archived
);
CREATE TABLE IF NOT EXISTS task_results (
    cell TEXT NOT NULL,
    task TEXT NOT NULL,
    style TEXT NOT NULL,
    mode TEXT NOT NULL,
    provider TEXT NOT NULL,
    final_candidate INTEGER,         -- candidates.id of the final kernel; NULL: none was correct
    correct INTEGER NOT NULL,
    bi_pass INTEGER NOT NULL,        -- independent dynamic audit of the final kernel
    speedup REAL,                    -- geomean speedup of the final kernel; NULL when none
    llm_calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    wall_s REAL NOT NULL,
    finished_at REAL NOT NULL,
    PRIMARY KEY (cell, task)
);
"""


def _close_connection(db: sqlite3.Connection, lock: threading.RLock) -> None:
    """Close a store's connection once no call of the store uses it, waiting at most 5 s for a
    thread that holds the store (at exit: a daemon thread stuck in a call); then it closes anyway,
    and SQLite finishes the close once that call's statement ends (sqlite3_close_v2)."""
    held = lock.acquire(timeout=5)
    try:
        db.close()
    finally:
        if held:
            lock.release()


def kernel_file(cell: str, task: str) -> str:
    """Where a loop's final kernel is saved, relative to the run directory."""
    return f"kernels/{re.sub(r'[^A-Za-z0-9_.-]+', '_', cell.replace('/', '--'))}/{task}.py"


class StoreFrozen(RuntimeError):
    """A write to a store frozen by an interrupted run: nothing after the interrupt is kept."""


class Store:
    """Thread-safe access to one run's results database."""

    def __init__(self, path: str | Path, schema: str = SCHEMA) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(schema)
        except BaseException:  # not a database, a locked one: no connection is left open
            self._db.close()
            raise
        self._frozen = False
        self._closed = False
        # Closes the connection when the store is dropped unclosed or this process exits (a store
        # kept for the process, like the kernel archive's): a connection never closed leaves the
        # -wal and -shm files behind.
        self._finalizer = weakref.finalize(self, _close_connection, self._db, self._lock)

    def freeze(self) -> None:
        """Refuse every later write (reads go on): an interrupted run keeps what it had written
        before the interrupt, never an outcome of the stages the interrupt cut short."""
        with self._lock:
            self._frozen = True

    def close(self) -> None:
        """Close the connection (again: nothing). Later use raises StoreFrozen when the store was
        frozen first (threads a stopped run cut short), else sqlite3.ProgrammingError."""
        with self._lock:
            self._closed = True
            self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            if self._frozen:
                raise StoreFrozen(f"{self.path}: the run was stopped; the store is closed")
            raise sqlite3.ProgrammingError(f"{self.path}: the store is closed")

    def _insert(self, table: str, row: dict[str, Any]) -> int:
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        values = [json.dumps(v) if isinstance(v, (dict, list)) else v for v in row.values()]
        with self._lock:
            self._check_open()
            if self._frozen:
                raise StoreFrozen(f"{self.path}: the run was stopped; nothing more is written")
            cur = self._db.execute(f"INSERT OR REPLACE INTO {table} ({cols}) VALUES ({marks})", values)
            return int(cur.lastrowid)

    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with self._lock:
            self._check_open()
            return [dict(r) for r in self._db.execute(sql, params).fetchall()]

    # Writers ------------------------------------------------------------------------------
    def add_candidate(self, **row: Any) -> int:
        row.setdefault("created_at", time.time())
        return self._insert("candidates", row)

    def add_gate_result(self, candidate_id: int, gate: str, passed: bool, enforced: bool, seconds: float,
                        findings: list[dict], counterexample: dict | None = None,
                        error: str | None = None) -> None:
        self._insert("gate_results", {
            "candidate_id": candidate_id, "gate": gate, "passed": int(passed), "enforced": int(enforced),
            "seconds": seconds, "findings": findings,
            "counterexample": json.dumps(counterexample) if counterexample else None, "error": error})

    def add_timing(self, candidate_id: int, shape: dict, candidate_median: float | None,
                   reference_median: float | None, speedup: float | None) -> None:
        self._insert("timings", {"candidate_id": candidate_id, "shape": shape,
                                 "candidate_median": candidate_median,
                                 "reference_median": reference_median, "speedup": speedup})

    def add_seeded(self, candidate_id: int, archive: str, archive_id: int,
                   archived_speedup: float | None) -> None:
        if not self.query("SELECT 1 FROM seeded WHERE candidate_id = ?", candidate_id):
            self._insert("seeded", {"candidate_id": candidate_id, "archive": archive,
                                    "archive_id": archive_id, "archived_speedup": archived_speedup})

    def add_exchange(self, **row: Any) -> int:
        row.setdefault("created_at", time.time())
        return self._insert("exchanges", row)

    def finish_task(self, **row: Any) -> None:
        row.setdefault("finished_at", time.time())
        self._insert("task_results", row)

    # Evaluation cache ---------------------------------------------------------------------
    def cached_evaluation(self, key: str) -> dict | None:
        rows = self.query("SELECT result FROM evaluations WHERE key = ?", key)
        return json.loads(rows[0]["result"]) if rows else None

    def cache_evaluation(self, key: str, code_hash: str, task: str, device: str, result: dict) -> None:
        self._insert("evaluations", {"key": key, "hash": code_hash, "task": task, "device": device,
                                     "result": json.dumps(result), "created_at": time.time()})

    # Readers ------------------------------------------------------------------------------
    def task_results(self, cell: str | None = None) -> list[dict[str, Any]]:
        if cell is None:
            return self.query("SELECT * FROM task_results ORDER BY cell, task")
        return self.query("SELECT * FROM task_results WHERE cell = ? ORDER BY task", cell)

    def finished(self, cell: str, task: str) -> bool:
        return bool(self.query("SELECT 1 FROM task_results WHERE cell = ? AND task = ?", cell, task))

    def candidates(self, cell: str | None = None, task: str | None = None) -> list[dict[str, Any]]:
        sql, params = "SELECT * FROM candidates WHERE 1=1", []
        if cell is not None:
            sql, params = sql + " AND cell = ?", [*params, cell]
        if task is not None:
            sql, params = sql + " AND task = ?", [*params, task]
        return self.query(sql + " ORDER BY id", *params)

    def gate_results(self, candidate_id: int) -> list[dict[str, Any]]:
        rows = self.query("SELECT * FROM gate_results WHERE candidate_id = ?", candidate_id)
        for r in rows:
            r["findings"] = json.loads(r["findings"])
            r["counterexample"] = json.loads(r["counterexample"]) if r["counterexample"] else None
        return rows
