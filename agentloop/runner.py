"""The campaign runner: one optimisation loop per (cell, task), several at a time, over one
worker pool, with a progress display.

A run directory holds `results.sqlite` (the results store and the evaluation cache),
`checkpoints.sqlite` (LangGraph's checkpoints, one thread per loop, the latest two kept),
`exchanges.jsonl` (every LLM exchange), `campaign.yaml` (the campaign as run) and `kernels/`
(each loop's final kernel).
`resume=True` continues a killed run: finished loops are skipped, unfinished ones continue
from their last checkpoint, and no evaluation or answered LLM call is repeated.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import typing
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentloop.campaign import Campaign, CampaignError, Cell
from agentloop.context import LoopContext, RunAborted
from agentloop.evaluator import CachedEvaluator
from agentloop.graph import build_graph
from agentloop.pool import WorkerPool
from agentloop.providers import ExchangeRecorder, Provider, ProviderError, get_provider
from agentloop.state import Candidate, LoopState
from agentloop.store import Store
from agentloop.styles import ROLES, make_style
from gates.contract import Task, get_task

RESULTS = "results.sqlite"
CHECKPOINTS = "checkpoints.sqlite"
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

    def put(self, config, checkpoint, metadata, new_versions):
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
    return saver


def thread_id(cell: Cell, task: str) -> str:
    return f"{cell.id}|{task}"


def make_providers(campaign: Campaign) -> dict[str, Provider]:
    """One provider per role (roles sharing a provider:model share the object)."""
    by_spec: dict[str, Provider] = {}
    providers = {}
    for role in ROLES:
        spec = campaign.role_model(role)
        if spec not in by_spec:
            try:
                by_spec[spec] = get_provider(spec, **campaign.model_options)
            except ProviderError as exc:  # unknown provider, missing key, bad option: before any work
                raise CampaignError(f"{role} model: {exc}") from None
        providers[role] = by_spec[spec]
    return providers


def prepare_run_dir(campaign: Campaign, out: Path, resume: bool) -> None:
    """Create the run directory, refusing to overwrite a run unless resuming it."""
    if (out / RESULTS).exists() and not resume:
        raise CampaignError(f"{out} already holds a run; pass --resume to continue it, "
                            "or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / "campaign.yaml").write_text(yaml.safe_dump(campaign.model_dump(mode="json", by_alias=True),
                                                      sort_keys=False))


class LoopProgress:
    """The rich progress display: one bar for the campaign, one line per running loop."""

    def __init__(self, console: Console, total: int, done: int) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=False)
        self.overall = self.progress.add_task("[bold]loops", total=total, completed=done)
        self._rows: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> LoopProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def start(self, key: str, total: int) -> None:
        with self._lock:
            self._rows[key] = self.progress.add_task(f"  {key}", total=total)

    def candidate(self, ctx: LoopContext, state: LoopState, c: Candidate) -> None:
        key = thread_id(ctx.cell, ctx.task.name)
        speed = max((x.speedup or 0 for x in [*state.eligible(ctx.bi_aware), c] if x.accepted), default=0)
        what = "accepted" if c.accepted else f"rejected ({c.rejected_by})"
        with self._lock:
            row = self._rows.get(key)
        if row is not None:
            self.progress.update(row, completed=c.number,
                                 description=f"  {key}: #{c.number} {what}; best {speed:.3g}x")

    def finish(self, key: str, line: str) -> None:
        with self._lock:
            row = self._rows.pop(key, None)
        if row is not None:
            self.progress.remove_task(row)
        self.progress.console.print(line, highlight=False)
        self.progress.advance(self.overall)


def run_campaign(campaign: Campaign, out: str | Path, *, resume: bool = False,
                 console: Console | None = None, pool_factory: Callable[..., WorkerPool] = WorkerPool
                 ) -> RunOutcome:
    """Run (or, with resume, continue) every loop of a campaign into the run directory `out`."""
    started = time.perf_counter()
    out = Path(out)
    tasks = {name: get_task(name) for name in campaign.task_names()}
    providers = make_providers(campaign)  # a missing key fails here, before anything runs
    prepare_run_dir(campaign, out, resume)
    store = Store(out / RESULTS)
    saver = checkpointer(out / CHECKPOINTS)
    loops = [(cell, task) for cell in campaign.cells() for task in tasks]
    todo = [(cell, task) for cell, task in loops if not store.finished(cell.id, task)]
    run = None
    try:
        if todo:
            pool = pool_factory(campaign.device, campaign.workers)
            evaluator = CachedEvaluator(pool, store, campaign.eval_settings())
            run = LoopRunner(campaign, tasks, providers, evaluator, store, build_graph(saver), out)
            try:
                with LoopProgress(console or Console(), len(loops), len(loops) - len(todo)) as progress:
                    run.run_all(todo, progress)
            finally:
                pool.close()
    finally:
        saver.conn.close()
        store.close()
    hits, misses = (run.evaluator.hits, run.evaluator.misses) if run else (0, 0)
    return RunOutcome(run_dir=out, loops=len(loops), ran=len(todo), seconds=time.perf_counter() - started,
                      cache_hits=hits, cache_misses=misses)


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

    def __post_init__(self) -> None:
        self.recorder = ExchangeRecorder(self.out)
        self.abort = threading.Event()

    def context(self, cell: Cell, task: str, executor: ThreadPoolExecutor,
                progress: LoopProgress) -> LoopContext:
        c = self.campaign
        style = make_style(cell.style, getattr(c, cell.style))
        return LoopContext(task=self.tasks[task], cell=cell, style=style, budget=c.budget,
                           evaluator=self.evaluator, store=self.store, recorder=self.recorder,
                           providers=self.providers, executor=executor, run_dir=self.out, seed=c.seed,
                           abort=self.abort, on_candidate=progress.candidate)

    def run_all(self, todo: list[tuple[Cell, str]], progress: LoopProgress) -> None:
        """Run the loops; the first failure stops the others at their next node and is raised."""
        size = self.evaluator.pool.size
        with ThreadPoolExecutor(max(2, 2 * size), thread_name_prefix="evaluate") as evaluations, \
                ThreadPoolExecutor(self.campaign.parallel or 2 * size, thread_name_prefix="loop") as loops:

            def one(cell: Cell, task: str) -> None:
                key = thread_id(cell, task)
                progress.start(key, self.campaign.budget.iterations)
                state = run_loop_graph(self.graph, self.context(cell, task, evaluations, progress))
                progress.finish(key, f"{key}: {outcome_line(state)}")

            futures = [loops.submit(one, cell, task) for cell, task in todo]
            try:
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            except BaseException:  # Ctrl-C: the loops stop at their next node
                self.abort.set()
                raise
            if any(f.exception() is not None for f in done):
                self.abort.set()  # the other loops stop at their next node; their checkpoints stay
                wait(futures)
                errors = [f.exception() for f in futures if f.exception() is not None]
                raise next((e for e in errors if not isinstance(e, RunAborted)), errors[0])


def outcome_line(state: LoopState) -> str:
    """One line on how a loop ended."""
    if state.final is None:
        return f"{len(state.candidates)} candidates, no correct kernel ({state.stop_reason})"
    bi = "BI pass" if state.bi_pass else "BI fail"
    return (f"{len(state.candidates)} candidates, final #{state.final} "
            f"{state.candidate(state.final).speedup:.3g}x, {bi} ({state.stop_reason})")


def run_loop_graph(graph: Any, ctx: LoopContext) -> LoopState:
    """Run one loop to its end: from the start, or from its last checkpoint."""
    config = {"configurable": {"thread_id": thread_id(ctx.cell, ctx.task.name)},
              "recursion_limit": RECURSION_LIMIT}
    snapshot = graph.get_state(config)
    if not snapshot.values:
        start: LoopState | None = LoopState(task=ctx.task.name)
    elif snapshot.next:
        start = None  # continue from the checkpoint
    else:
        return LoopState.model_validate(snapshot.values)  # finished; its result is in the store
    result = graph.invoke(start, config, context=ctx, durability="sync")
    return LoopState.model_validate(result)


def summary_table(summary: dict) -> Table:
    """The cells of a run's summary.json as a table: what `agentloop run` and `agentloop report`
    print at the end."""
    table = Table(title=f"{summary['campaign']}")
    cols = ("style", "mode", "provider", "tasks", "correct", "bi_pass", "geomean_speedup", "llm_calls")
    for col in cols:
        table.add_column(col.replace("_", " "), justify="left" if col in cols[:3] else "right")
    for cell in summary["cells"]:
        table.add_row(*(f"{cell[c]:.3g}x" if c == "geomean_speedup" else str(cell[c]) for c in cols))
    return table
