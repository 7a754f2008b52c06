"""Where a run stands (`agentloop status DIR`): its loops, the stage each is at, and the
`exchange:` requests they wait for, a malformed response file among them. Read from the run
directory only; nothing is run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentloop.campaign.file import Campaign, CampaignError, load_campaign
from agentloop.providers.exchange import exchange_dir, response_problem

_REQUEST = re.compile(r"^(\d+)\.request\.json$")
_TASK_LINE = re.compile(r"^\s*task\s*:\s*`?([A-Za-z0-9_.-]+)`?\s*$", re.MULTILINE)


class WaitingRequest(BaseModel):
    """An `exchange:` request without a valid response file yet."""

    request: str
    """The request file."""
    respond_with: str
    """The file the answer goes in."""
    loop: str | None
    """"cell|task" of the loop that asked, when the request file says."""
    task: str | None
    role: str | None
    problem: str | None = None
    """Set when a response file is there but is not a valid response (not JSON, no `text`): what
    is wrong with it, in one line; the run waits for a corrected file."""


class LoopStatus(BaseModel):
    """One loop of the run."""

    loop: str
    """"cell|task", as the progress display and the results store name it."""
    state: str
    """finished, at <node>, waiting for an answer, or not started."""
    candidates: int
    final: str | None = None
    """How it ended (final kernel, speedup, BI), for a finished loop."""
    waits_for: list[str] = []
    """Response files it waits for."""


class RunStatus(BaseModel):
    run_dir: str
    campaign: str
    loops: list[LoopStatus]
    waiting: list[WaitingRequest]
    """Every unanswered exchange request of the run's exchange directories."""


def exchange_dirs(campaign: Campaign, run_dir: Path | None = None) -> list[Path]:
    """The directories of the campaign's `exchange:` providers, as the run of `run_dir` uses
    them (a relative one is inside the run directory: `exchange_dir`)."""
    specs = {campaign.model, *campaign.roles.values()}
    return sorted({exchange_dir(s.split(":", 1)[1], run_dir, resumed=True)
                   for s in specs if s.startswith("exchange:") and s.split(":", 1)[1]})


def waiting_requests(directory: Path) -> list[WaitingRequest]:
    """Request files of an exchange directory that have no valid response file yet (a malformed
    one is named in `problem`)."""
    found = []
    if not directory.is_dir():
        return found
    numbered = sorted((int(m[1]), p) for p in directory.iterdir() if (m := _REQUEST.match(p.name)))
    for n, path in numbered:
        response = directory / f"{n}.response.json"
        problem = response_problem(response) if response.is_file() else None
        if response.is_file() and problem is None:
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        meta = data.get("meta") or {}
        task = meta.get("task")
        if task is None:
            text = "\n".join(m.get("content", "") for m in data.get("messages", [])
                             if m.get("role") != "assistant")
            found_task = _TASK_LINE.search(text)
            task = found_task.group(1) if found_task else None
        loop = f"{meta['cell']}|{meta['task']}" if meta.get("cell") and meta.get("task") else None
        found.append(WaitingRequest(request=str(path), respond_with=str(response), loop=loop, task=task,
                                    role=meta.get("role"), problem=problem))
    return found


def run_status(run_dir: Path) -> RunStatus:
    """The status of every loop of a run directory; CampaignError (one line) for a directory
    that holds no run."""
    from agentloop.campaign.run import CHECKPOINTS, RESULTS, checkpointer, thread_id
    from agentloop.loop.graph import build_graph
    from agentloop.results.store import Store

    if not (run_dir / RESULTS).is_file() or not (run_dir / "campaign.yaml").is_file():
        raise CampaignError(f"{run_dir} holds no run (no {RESULTS} and campaign.yaml); give the directory "
                            "that `agentloop run` wrote")
    campaign = load_campaign(run_dir / "campaign.yaml")
    waiting = [w for d in exchange_dirs(campaign, run_dir) for w in waiting_requests(d)]
    store = Store(run_dir / RESULTS)
    saver = None
    loops = []
    try:
        saver = checkpointer(run_dir / CHECKPOINTS) if (run_dir / CHECKPOINTS).is_file() else None
        graph = build_graph(saver) if saver else None
        finished = {(r["cell"], r["task"]): r for r in store.task_results()}
        for cell in campaign.cells():
            for task in campaign.task_names():
                key = thread_id(cell, task)
                count = len(store.candidates(cell.id, task))
                waits = [w.respond_with for w in waiting if w.loop == key]
                problems = [w.problem for w in waiting if w.loop == key and w.problem]
                result = finished.get((cell.id, task))
                if result is not None:
                    loops.append(LoopStatus(loop=key, state="finished", candidates=count,
                                            final=_ending(result, store)))
                    continue
                nxt: tuple[str, ...] = ()
                if graph is not None:
                    snapshot = graph.get_state({"configurable": {"thread_id": key}})
                    # `tasks`, not only `next`: a node whose writes were saved before a kill
                    # is in tasks alone, and the loop goes on from there (run_loop_graph)
                    if snapshot.values:
                        nxt = tuple(snapshot.next) or tuple(t.name for t in snapshot.tasks)
                if problems:  # the table shows the state: say there what to correct
                    state = f"waiting for a corrected answer: {problems[0]}"
                elif waits:
                    state = "waiting for an answer"
                elif nxt:
                    state = f"at {nxt[0]}"
                else:
                    state = "not started" if not count else "started (no checkpoint)"
                loops.append(LoopStatus(loop=key, state=state, candidates=count, waits_for=waits))
    finally:  # both closed, so that no -wal or -shm file is left beside them
        store.close()
        if saver is not None:
            saver.close()
    return RunStatus(run_dir=str(run_dir), campaign=campaign.name, loops=loops, waiting=waiting)


def _ending(result: dict[str, Any], store: Any) -> str:
    if not result["correct"]:
        return "no correct kernel"
    final = store.query("SELECT iteration FROM candidates WHERE id = ?", result["final_candidate"])
    number = f"#{final[0]['iteration']}" if final else "?"
    return f"final {number} {result['speedup']:.3g}x, BI {'pass' if result['bi_pass'] else 'fail'}"
