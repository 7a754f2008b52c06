"""The campaign runner: one optimisation loop per (cell, task), several at a time, over one
worker pool, with a progress display.

A run directory holds `results.sqlite` (the results store and the evaluation cache),
`checkpoints.sqlite` (LangGraph's checkpoints, one thread per loop, the latest two kept),
`exchanges.jsonl` (every LLM exchange), `campaign.yaml` (the campaign as run) and `kernels/`
(each loop's final kernel).
`resume=True` continues a killed run: finished loops are skipped, unfinished ones continue
from their last checkpoint, and no evaluation or answered LLM call is repeated.

A run stops early on SIGINT or SIGTERM (`handle_signals=True`, the command line) or, with
`until_idle=True`, once every loop that could run waits for an `exchange:` answer: the results
store and the checkpointer are frozen (nothing a cut-short stage produced is kept), the workers
are killed, queued loops never start, and `RunStopped` says what was kept.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import threading
import time
import typing
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from agentloop.campaign.file import Campaign, CampaignError
from agentloop.evaluation.cache import CachedEvaluator
from agentloop.evaluation.pool import WorkerPool
from agentloop.loop.cell import Cell
from agentloop.loop.context import LoopContext, RunAborted
from agentloop.loop.graph import build_graph
from agentloop.loop.state import Candidate, LoopState, speedup_tolerance
from agentloop.loop.styles import ROLES, make_style
from agentloop.providers import ExchangeRecorder, Provider, ProviderError, get_provider
from agentloop.results.archive import Archive, ArchiveOptions, loop_seeds, open_archive
from agentloop.results.store import Store, StoreFrozen
from gates.contract import Task, get_task

log = logging.getLogger("agentloop")
"""What the loops do, stage by stage (`agentloop -v run` shows it)."""

RESULTS = "results.sqlite"
CHECKPOINTS = "checkpoints.sqlite"
PROVENANCE = "provenance.jsonl"
"""One line per `agentloop run` on the directory: when, how long, which code, versions, device."""
RECURSION_LIMIT = 100_000
"""Graph steps one loop may take; the budget, not this, is what ends a loop."""


@dataclass
class RunOutcome:
    """What a call to `run_campaign` did."""

    run_dir: Path
    loops: int
    """(cell, task) loops in the campaign."""
    ran: int
    """Loops run (or continued) by this call; the others had finished before."""
    seconds: float
    cache_hits: int
    cache_misses: int
    stages_held: tuple[int, int] | None = None
    """(stages that ran in a worker whose runners held their candidate, stages run in workers);
    None where the pool does not count them (a Ray cluster)."""
    memory_retries: int = 0
    """Stages run again because the GPU was out of memory (agentloop.evaluation.pool)."""
    notes: list[str] = field(default_factory=list)
    """Lines the providers have to say on the run (where a replay diverged from its record)."""


def _say_isolation(pool: Any, console: Console, taken: dict) -> None:
    """Print the cage the candidates run in (network and file namespaces or the audit hook's
    blocks, uid, limits, arena) once a worker can say, without holding up the first loops;
    it goes into the run's provenance too."""
    from gates.judge.isolation import describe_isolation

    def say() -> None:
        try:
            iso = pool.isolation()
        except RuntimeError:  # the pool closed first (a stopped run)
            return
        taken["isolation"] = iso  # the key exists already: the dict does not grow meanwhile
        console.print(f"candidates run caged: {describe_isolation(iso)}", highlight=False)

    taken["isolation"] = None
    threading.Thread(target=say, daemon=True, name="isolation").start()


class StopRequested(BaseException):
    """Raised in the main thread to stop a run early: a signal's name, or "idle"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Kept:
    """What a stopped run keeps in its directory."""

    run_dir: Path
    loops: int
    finished: int
    """Loops finished (their results are in the store)."""
    checkpointed: int
    """Unfinished loops kept at their last checkpoint."""
    candidates: int
    """Candidates recorded (accepted or rejected), all loops."""
    waiting: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    """Exchange requests waited for when the run stopped: (response file, meta)."""


class RunStopped(Exception):
    """A run stopped before its end: by a signal (`reason` its name) or idle (`--until-idle`)."""

    def __init__(self, reason: str, kept: Kept, seconds: float) -> None:
        super().__init__(f"stopped ({reason})")
        self.reason = reason
        self.kept = kept
        self.seconds = seconds


@contextmanager
def stop_on_signals(enabled: bool) -> Iterator[None]:
    """SIGINT and SIGTERM raise StopRequested in the main thread; a second one exits at once
    (status 130). The handlers stay installed after a stop: the caller exits soon after."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        seen.append(signum)
        if len(seen) > 1:
            os.write(2, b"second interrupt: exiting now\n")
            os._exit(130)
        raise StopRequested(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    stopped = False
    try:
        yield
    except StopRequested:
        stopped = True
        raise
    finally:
        if not stopped and not seen:
            for s, h in old.items():
                signal.signal(s, h)


def model_types(model: type[BaseModel]) -> set[tuple[str, str]]:
    """(module, name) of a pydantic model and of every model its fields hold, at any depth."""
    found: set[tuple[str, str]] = set()
    todo: list[Any] = [model]
    while todo:
        t = todo.pop()
        if isinstance(t, type) and issubclass(t, BaseModel):
            if (t.__module__, t.__name__) in found:
                continue
            found.add((t.__module__, t.__name__))
            todo.extend(f.annotation for f in t.model_fields.values())
        else:
            todo.extend(typing.get_args(t))
    return found


class LatestCheckpoints(SqliteSaver):
    """LangGraph's SQLite checkpointer, keeping only each loop's `keep` latest checkpoints.

    A resume needs the latest one only. A loop's state holds its whole history, so keeping
    every checkpoint (one per node) would grow with the square of the loop's length."""

    keep: int | None = 2
    """Checkpoints kept per loop; None keeps them all (a loop's history, for inspection)."""
    frozen: bool = False
    closed: bool = False

    def freeze(self) -> None:
        """Refuse every later write: a stopped run keeps each loop's last checkpoint from before
        the stop, never a node's result that the stop cut short."""
        with self.lock:
            self.frozen = True

    def close(self) -> None:
        """Close the connection, once no call uses it (again: nothing); SQLite then removes the
        -wal and -shm files unless another process still reads the file. Later use raises
        StoreFrozen (a stopped run's threads) or sqlite3.ProgrammingError."""
        with self.lock:
            self.closed = True
            self.conn.close()

    def setup(self) -> None:
        # Every read and write goes through cursor(), which calls setup() holding the lock: the
        # one place to refuse a closed connection without racing close().
        if self.closed:
            if self.frozen:
                raise StoreFrozen("the run was stopped; the checkpoints are closed")
            raise sqlite3.ProgrammingError("the checkpointer is closed")
        super().setup()

    def _check_frozen(self) -> None:
        if self.frozen:
            raise StoreFrozen("the run was stopped; no more checkpoints are written")

    def put_writes(self, config, writes, task_id, task_path=""):
        with self.lock:
            self._check_frozen()
        return super().put_writes(config, writes, task_id, task_path)

    def put(self, config, checkpoint, metadata, new_versions):
        with self.lock:
            self._check_frozen()
        saved = super().put(config, checkpoint, metadata, new_versions)
        if self.keep is None:
            return saved
        key = (str(config["configurable"]["thread_id"]), config["configurable"].get("checkpoint_ns", ""))
        with self.cursor() as cur:
            cur.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
                        "ORDER BY checkpoint_id DESC LIMIT -1 OFFSET ?", (*key, self.keep))
            old = [(*key, row[0]) for row in cur.fetchall()]
            for table in ("checkpoints", "writes"):
                cur.executemany(f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = ? "
                                "AND checkpoint_id = ?", old)
        return saved


def checkpointer(path: Path, keep: int | None = LatestCheckpoints.keep) -> LatestCheckpoints:
    """The SQLite checkpointer on `path`, keeping `keep` checkpoints per loop (None: all),
    allowed to rebuild the loop state's models."""
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        serde = JsonPlusSerializer(allowed_msgpack_modules=sorted(model_types(LoopState)))
    except TypeError:  # a langgraph-checkpoint without allow-lists rebuilds any type
        serde = None
    saver = LatestCheckpoints(conn, serde=serde)
    saver.keep = keep
    # A checkpointer dropped unclosed, or open when this process exits, is closed then: a
    # connection never closed leaves the -wal and -shm files behind.
    weakref.finalize(saver, conn.close)
    return saver


def thread_id(cell: Cell, task: str) -> str:
    return f"{cell.id}|{task}"


def archive_context(campaign: Any, run_dir: Path, loop: str, task: str, mode: str,
                    archive: Archive | None = None) -> dict[str, Any]:
    """The archive-related fields of a loop's context (`LoopContext`): the archive it records
    into (`archive`, opened by the run, which closes it; else the process's own), the kernels it
    starts from, the campaign's name."""
    options: ArchiveOptions = campaign.archive
    if archive is None and options.record:
        archive = open_archive(options.file(run_dir))
    return {"archive": archive if options.record else None,
            "seeds": loop_seeds(options, run_dir, campaign.device, loop, task, mode),
            "campaign_name": campaign.name}


def make_providers(campaign: Campaign, run_dir: Path | None = None) -> dict[str, Provider]:
    """One provider per role (roles sharing a provider:model share the object). A relative
    `exchange:DIR` is the run directory's DIR (`exchange_dir`), so a run resumed from another
    directory waits where it asked; the spec, and so the cell's name, stays as written."""
    from agentloop.providers.exchange import exchange_dir

    by_spec: dict[str, Provider] = {}
    providers = {}
    for role in ROLES:
        spec = campaign.role_model(role)
        if spec not in by_spec:
            name, _, where = spec.partition(":")
            built = spec
            if name.strip() == "exchange" and where and run_dir is not None:
                resumed = (run_dir / RESULTS).is_file()
                built = f"exchange:{exchange_dir(where, run_dir, resumed=resumed)}"
            try:
                by_spec[spec] = get_provider(built, **campaign.model_options)
            except ProviderError as exc:  # unknown provider, missing key, bad option: before any work
                raise CampaignError(f"{role} model: {exc}") from None
        providers[role] = by_spec[spec]
    return providers


def provenance(campaign: Campaign, started: float) -> dict[str, Any]:
    """Where and with what a run (one invocation) runs; every value a string or a number.
    Taken when the run starts, so that a stop does not wait for it; `seconds` and `ended` are
    filled in at the end."""
    import platform
    import subprocess
    from datetime import datetime, timezone
    from importlib.metadata import PackageNotFoundError, version

    def dist(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "-"

    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"],
                                cwd=Path(__file__).resolve().parent, capture_output=True, text=True,
                                timeout=10).stdout.strip() or "-"
    except (OSError, subprocess.SubprocessError):
        commit = "-"
    if campaign.device == "cuda":  # asked of the driver: no CUDA context in this process
        try:
            names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=10).stdout.split("\n")
        except (OSError, subprocess.SubprocessError):
            names = []
        gpus = [n.strip() for n in names if n.strip()]
        device_name = f"{len(gpus)} x {gpus[0]}" if gpus else "-"
    else:
        names = [line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")]
        device_name = names[0] if names else platform.processor() or platform.machine()
    return {"started": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
            "seconds": 0.0, "ended": "", "commit": commit, "agentloop": dist("agentloop"),
            "torch": dist("torch"), "triton": dist("triton"), "python": platform.python_version(),
            "host": platform.node(), "device": campaign.device, "device_name": device_name}


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def record_provenance(out: Path, taken: dict[str, Any], seconds: float, ended: str) -> None:
    """Append this invocation's provenance line to `DIR/provenance.jsonl`."""
    import json

    try:
        with (out / PROVENANCE).open("a") as f:
            f.write(json.dumps({**taken, "seconds": round(seconds, 1), "ended": ended}) + "\n")
    except OSError:
        pass  # provenance is for the report; a read-only directory must not fail the run


def campaign_dump(campaign: Campaign) -> dict[str, Any]:
    """A campaign as `DIR/campaign.yaml` holds it."""
    return campaign.model_dump(mode="json", by_alias=True)


def prepare_run_dir(campaign: Campaign, out: Path, resume: bool, *, campaign_changed: bool = False) -> None:
    """Create the run directory, refusing to overwrite a run unless resuming it. A resumed run
    keeps its own `campaign.yaml`: another campaign is refused unless `campaign_changed`."""
    if out.exists() and not out.is_dir():
        raise CampaignError(f"--out {out} is a file, not a directory; choose another --out")
    if resume and not (out / RESULTS).is_file():
        raise CampaignError(f"{out} holds no run to resume (no {RESULTS}); start one without --resume")
    if (out / RESULTS).exists() and not resume:
        raise CampaignError(f"{out} already holds a run; continue it with: agentloop run --resume --out {out}"
                            " (or choose another --out)")
    saved = out / "campaign.yaml"
    if resume and saved.is_file() and not campaign_changed:
        old = yaml.safe_load(saved.read_text())
        old = old if isinstance(old, dict) else {}
        new = campaign_dump(campaign)
        # Where evaluations run does not change results: a run may resume on or off a cluster.
        differ = sorted(k for k in {**old, **new} if k != "cluster" and old.get(k) != new.get(k))
        if differ:
            keys = differ
            raise CampaignError(f"{out} holds a run of another campaign (it differs in {', '.join(keys)}); "
                                f"resume it with its own: agentloop run --resume --out {out}, or pass "
                                "--campaign-changed to continue it under the new one")
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        saved.write_text(yaml.safe_dump(campaign_dump(campaign), sort_keys=False))
    except OSError as exc:
        raise CampaignError(f"cannot write the run directory {out}: {exc.strerror or exc}") from None


class LoopProgress:
    """The rich progress display: one bar for the campaign (with an ETA), one line per running
    loop saying its candidates so far, the stage it is in, and the file it waits for."""

    def __init__(self, console: Console, total: int, done: int) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=16),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=console, transient=False)
        self.overall = self.progress.add_task("[bold]loops", total=total, completed=done)
        self._rows: dict[str, Any] = {}
        self._status: dict[str, str] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> LoopProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def start(self, key: str, total: int, done: int = 0) -> None:
        """A loop starts; `done` candidates it had before (a resumed loop)."""
        with self._lock:
            self._status[key] = f"resumed at #{done}" if done else "starting"
            self._rows[key] = self.progress.add_task(f"  {key}: {self._status[key]}", total=total,
                                                     completed=done)

    def _describe(self, key: str, what: str) -> None:
        with self._lock:
            row = self._rows.get(key)
        if row is not None:
            self.progress.update(row, description=f"  {key}: {self._status.get(key, '')}; {what}")

    def stage(self, ctx: LoopContext, what: str) -> None:
        key = thread_id(ctx.cell, ctx.task.name)
        log.info("%s: %s", key, what)
        self._describe(key, what)

    def candidate(self, ctx: LoopContext, state: LoopState, c: Candidate) -> None:
        key = thread_id(ctx.cell, ctx.task.name)
        speed = max((x.speedup or 0 for x in [*state.eligible(ctx.bi_aware), c] if x.accepted), default=0)
        what = "accepted" if c.accepted else f"rejected ({c.rejected_by})"
        log.info("%s: candidate #%d %s, speedup %s", key, c.number, what, c.speedup)
        with self._lock:
            row = self._rows.get(key)
            self._status[key] = f"#{c.number} {what}; best " + (f"{speed:.3g}x" if speed else "-")
        if row is not None:
            self.progress.update(row, completed=c.number, description=f"  {key}: {self._status[key]}")

    def waiting(self, path: Path, meta: dict[str, Any]) -> None:
        """An `exchange:` request waits for its answer: say which file, once."""
        key = f"{meta.get('cell')}|{meta.get('task')}"
        self._describe(key, f"waiting for {path}")
        self.progress.console.print(f"{key} ({meta.get('role', 'coder')}) waits for an answer in {path}",
                                    highlight=False)

    def finish(self, key: str, line: str) -> None:
        with self._lock:
            row = self._rows.pop(key, None)
        if row is not None:
            self.progress.remove_task(row)
        self.progress.console.print(line, highlight=False)
        self.progress.advance(self.overall)


def exchange_waits(providers: dict[str, Provider]) -> list[tuple[Path, dict[str, Any]]]:
    """(response file, meta) of every `exchange:` request waited for now."""
    waits = []
    for p in {id(p): p for p in providers.values()}.values():
        if hasattr(p, "waiting_paths"):
            waits.extend(p.waiting_paths())
    return waits


def run_campaign(campaign: Campaign, out: str | Path, *, resume: bool = False,
                 console: Console | None = None, pool_factory: Callable[..., WorkerPool] | None = None,
                 handle_signals: bool = False, until_idle: bool = False,
                 campaign_changed: bool = False, ray: str | None = None) -> RunOutcome:
    """Run (or, with resume, continue) every loop of a campaign into the run directory `out`.

    `handle_signals`: SIGINT/SIGTERM stop the run (RunStopped). `until_idle`: stop (RunStopped,
    reason "idle") once every loop that could run waits for an `exchange:` answer. `ray`: the
    Ray cluster to evaluate on (`--ray`; "off": the local pool), over the campaign's `cluster`;
    `pool_factory` (tests) over both."""
    from agentloop.campaign.backend import evaluation_pool

    started = time.perf_counter()
    taken = provenance(campaign, time.time())
    out = Path(out)
    tasks = {name: get_task(name) for name in campaign.task_names()}
    providers = make_providers(campaign, out)  # a missing key fails here, before anything runs
    pool_factory = pool_factory or evaluation_pool(campaign, ray)  # Ray missing: fails here too
    prepare_run_dir(campaign, out, resume, campaign_changed=campaign_changed)
    store = Store(out / RESULTS)
    saver = archive = run = pool = None
    try:
        saver = checkpointer(out / CHECKPOINTS)
        loops = [(cell, task) for cell in campaign.cells() for task in tasks]
        todo = [(cell, task) for cell, task in loops if not store.finished(cell.id, task)]
        try:
            with stop_on_signals(handle_signals):
                if todo:
                    pool = pool_factory(campaign.device, campaign.workers)
                    if hasattr(pool, "describe"):
                        taken["evaluation"] = pool.describe()
                    console = console or Console()
                    if hasattr(pool, "isolation"):
                        _say_isolation(pool, console, taken)
                    evaluator = CachedEvaluator(pool, store, campaign.eval_settings())
                    archive = Archive(campaign.archive.file(out)) if campaign.archive.record else None
                    run = LoopRunner(campaign, tasks, providers, evaluator, store, build_graph(saver), out,
                                     archive)
                    try:
                        with LoopProgress(console, len(loops), len(loops) - len(todo)) as progress:
                            run.run_all(todo, progress, until_idle=until_idle)
                    except StopRequested:
                        freeze(store, saver, pool, run)  # before close(), which would wait for the stages
                        raise
                    finally:
                        pool.close()  # returns at once after a stop: the workers are already killed
        except StopRequested as stop:
            waits = exchange_waits(providers)
            freeze(store, saver, pool, run)
            finished = sum(store.finished(cell.id, task) for cell, task in loops)
            threads = {r[0] for r in saver.conn.execute("SELECT DISTINCT thread_id FROM checkpoints")}
            unfinished = {thread_id(cell, task) for cell, task in loops if not store.finished(cell.id, task)}
            kept = Kept(run_dir=out, loops=len(loops), finished=finished,
                        checkpointed=len(threads & unfinished),
                        candidates=store.query("SELECT COUNT(*) AS n FROM candidates")[0]["n"], waiting=waits)
            seconds = time.perf_counter() - started
            record_provenance(out, taken, seconds, f"stopped ({stop.reason})")
            raise RunStopped(stop.reason, kept, time.perf_counter() - started) from None
    finally:
        # Every connection is closed, a stopped run's too (frozen first: a thread the stop cut
        # short gets StoreFrozen from them, as from a write), so that SQLite removes the -wal and
        # -shm files even where the caller then leaves with os._exit.
        for db in (archive, saver, store):
            if db is not None:
                db.close()
    record_provenance(out, taken, time.perf_counter() - started, "finished")
    hits, misses = (run.evaluator.hits, run.evaluator.misses) if run else (0, 0)
    notes = [line for p in {id(p): p for p in providers.values()}.values()
             for line in (p.divergence_lines() if hasattr(p, "divergence_lines") else [])]
    held = (pool.stages_held, pool.stages_run) if hasattr(pool, "stages_held") else None
    return RunOutcome(run_dir=out, loops=len(loops), ran=len(todo), seconds=time.perf_counter() - started,
                      cache_hits=hits, cache_misses=misses, stages_held=held,
                      memory_retries=getattr(pool, "memory_retries", 0), notes=notes)


def freeze(store: Store, saver: LatestCheckpoints, pool: WorkerPool | None, run: LoopRunner | None) -> None:
    """Stop a run now: no more writes, the loops stop at their next node, the workers die."""
    store.freeze()
    saver.freeze()
    if run is not None:
        if run.archive is not None:
            run.archive.freeze()  # a kernel a cut-short stage accepted is not archived either
        run.stop()
    if pool is not None:
        pool.terminate()


@dataclass
class LoopRunner:
    """Runs loops of one campaign, several at a time, over shared services."""

    campaign: Campaign
    tasks: dict[str, Task]
    providers: dict[str, Provider]
    evaluator: CachedEvaluator
    store: Store
    graph: Any
    out: Path
    archive: Archive | None = None
    """The kernel archive the loops record into (None: they do not); its owner closes it."""

    def __post_init__(self) -> None:
        self.recorder = ExchangeRecorder(self.out)
        self.abort = threading.Event()
        self.running: set[str] = set()
        """Loops running now, by thread id."""
        self._executors: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()

    def context(self, cell: Cell, task: str, executor: ThreadPoolExecutor,
                progress: LoopProgress) -> LoopContext:
        c = self.campaign
        style = make_style(cell.style, getattr(c, cell.style))
        return LoopContext(task=self.tasks[task], cell=cell, style=style, budget=c.budget,
                           evaluator=self.evaluator, store=self.store, recorder=self.recorder,
                           providers=self.providers, executor=executor, run_dir=self.out, seed=c.seed,
                           abort=self.abort, on_candidate=progress.candidate, on_stage=progress.stage,
                           **archive_context(c, self.out, thread_id(cell, task), task, cell.mode,
                                             self.archive))

    def stop(self) -> None:
        """The loops stop at their next node; queued loops never start; nobody waits for them."""
        self.abort.set()
        for executor in self._executors:
            executor.shutdown(wait=False, cancel_futures=True)

    def idle(self, parallel: int, queued: int) -> bool:
        """Every loop that could run now waits for an `exchange:` answer."""
        with self._lock:
            running = set(self.running)
        if not running or (queued and len(running) < parallel):
            return False
        waiting = {f"{meta.get('cell')}|{meta.get('task')}" for _, meta in exchange_waits(self.providers)}
        return running <= waiting

    def run_all(self, todo: list[tuple[Cell, str]], progress: LoopProgress, *,
                until_idle: bool = False) -> None:
        """Run the loops; the first failure stops the others at their next node and is raised.
        StopRequested (a signal, or idle with `until_idle`) stops them all at once."""
        size = self.evaluator.pool.size
        parallel = self.campaign.parallel or 2 * size
        evaluations = ThreadPoolExecutor(max(2, 2 * size), thread_name_prefix="evaluate")
        loops = ThreadPoolExecutor(parallel, thread_name_prefix="loop")
        self._executors = [loops, evaluations]
        for p in {id(p): p for p in self.providers.values()}.values():
            if hasattr(p, "on_wait"):
                p.on_wait = progress.waiting
        started = [0]

        def one(cell: Cell, task: str) -> None:
            key = thread_id(cell, task)
            with self._lock:
                self.running.add(key)
                started[0] += 1
            try:
                done = len(self.store.candidates(cell.id, task))
                progress.start(key, self.campaign.budget.iterations, done)
                state = run_loop_graph(self.graph, self.context(cell, task, evaluations, progress))
                progress.finish(key, f"{key}: {outcome_line(state)}")
            finally:
                with self._lock:
                    self.running.discard(key)

        futures: list[Future] = [loops.submit(one, cell, task) for cell, task in todo]
        idle_checks = 0
        while True:
            done, pending = wait(futures, timeout=0.25, return_when=FIRST_EXCEPTION)
            if not pending or any(f.exception() is not None for f in done):
                break
            if until_idle:
                with self._lock:
                    queued = len(todo) - started[0]
                idle_checks = idle_checks + 1 if self.idle(parallel, queued) else 0
                if idle_checks >= 2:  # twice in a row: not a loop between two requests
                    raise StopRequested("idle")
        if any(f.exception() is not None for f in done):
            self.abort.set()  # the other loops stop at their next node; their checkpoints stay
            wait(futures)
        for executor in self._executors:
            executor.shutdown(wait=True)
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise next((e for e in errors if not isinstance(e, RunAborted)), errors[0])


def outcome_line(state: LoopState) -> str:
    """One line on how a loop ended."""
    n = len(state.candidates)
    count = f"{n} candidate{'s' if n != 1 else ''}"
    if state.final is None:
        return f"{count}, no correct kernel ({state.stop_reason})"
    bi = "BI pass" if state.bi_pass else "BI fail"
    return (f"{count}, final #{state.final} "
            f"{state.candidate(state.final).speedup:.3g}x, {bi} ({state.stop_reason})")


def run_loop_graph(graph: Any, ctx: LoopContext) -> LoopState:
    """Run one loop to its end: from the start, or from its last checkpoint."""
    config = {"configurable": {"thread_id": thread_id(ctx.cell, ctx.task.name)},
              "recursion_limit": RECURSION_LIMIT}
    snapshot = graph.get_state(config)
    if not snapshot.values:
        start: LoopState | None = LoopState(task=ctx.task.name, tolerance=speedup_tolerance(ctx.device))
    elif snapshot.tasks:  # not `next`, which leaves out a task whose writes were saved before a kill
        start = None  # continue from the checkpoint
    else:
        return LoopState.model_validate(snapshot.values)  # finished; its result is in the store
    result = graph.invoke(start, config, context=ctx, durability="sync")
    return LoopState.model_validate(result)


def summary_table(summary: dict) -> Table:
    """The cells of a run's summary.json as a table: what `agentloop run` and `agentloop report`
    print at the end (the provider in the title when the run used one, so 80 columns suffice).
    The device and, on a CPU, that the verdicts are the interpreter's go in the caption; so does
    a partial run's reason; BI pass counts over the tasks that kept a kernel."""
    from rich import box
    from rich.markup import escape

    providers = list(dict.fromkeys(c["provider"] for c in summary["cells"]))
    title = summary["campaign"] + (f" ({providers[0]})" if len(providers) == 1 else "")
    notes = []
    device = summary.get("device") or ""
    if device:
        notes.append(f"device: {device}")
    if device.startswith("cpu"):
        notes.append("cpu interpreter: not a GPU verdict (BI and correctness measured in Triton's "
                     "interpreter; speedups are not kernel speed)")
    if summary.get("partial"):
        notes.append(f"partial: the run {summary['partial']}; resume it to finish the missing loops")
    table = Table(title=escape(title), box=box.SIMPLE_HEAD,
                  caption=escape("\n".join(notes)) if notes else None, caption_justify="left")
    cols = ("style", "mode", *(("provider",) if len(providers) > 1 else ()), "tasks", "correct", "bi_pass",
            "geomean_speedup", "geomean_production_speedup", "llm_calls")
    headers = {"bi_pass": "BI pass", "geomean_speedup": "geomean speedup",
               "geomean_production_speedup": "vs production", "llm_calls": "LLM calls"}
    for col in cols:
        table.add_column(headers.get(col, col), justify="left" if col in ("style", "mode", "provider")
                         else "right", overflow="fold")

    def text(cell: dict, c: str) -> str:
        if c in ("geomean_speedup", "geomean_production_speedup"):
            return f"{cell[c]:.3g}x" if cell.get(c) else "-"
        if c == "bi_pass":  # over the tasks that kept a kernel: a task without one is no BI failure
            return f"{cell['bi_pass']}/{cell['correct']}" if cell["correct"] else "n/a"
        return escape(str(cell[c]))

    for cell in summary["cells"]:
        table.add_row(*(text(cell, c) for c in cols))
    return table
