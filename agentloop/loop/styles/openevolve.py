"""`openevolve`: OpenEvolve (`pip install 'agentloop[openevolve]'`) proposes the loop's candidates
with its own evolutionary loop, on the campaign's model and gates.

The style's first `propose` of a loop runs OpenEvolve's controller for the loop's whole remaining
budget (one OpenEvolve iteration per candidate), in a process of its own
(`agentloop.frameworks.openevolve_run`): the task's reference (or the loop's best archived seed)
is the initial program, the prompt's system message is our coder prompt for the task and mode,
the loop's first seed is OpenEvolve's random seed. That process serves OpenEvolve an
OpenAI-compatible endpoint on a free loopback port and a gates evaluator
(`agentloop.frameworks.openevolve_evaluator`, three cascade stages); both ask this style, over
pipes, for what they answer: the loop's LLM (`p.llm`: recorded, reused on resume, counted in the
budget) and the loop's own cached evaluator (the campaign's worker pool: candidates run caged,
never in OpenEvolve's processes). OpenEvolve's programs come back as the round's proposals, one
per iteration in order, with their lineage; an iteration that produced no program is a proposal
without code (rejected at extraction, OpenEvolve's reason in its notes). The graph's nodes then
take them through every stage as any style's candidates (the evaluation cache answers what
OpenEvolve already had evaluated), record, feed back, archive and score them the same way.

Stopped or killed mid-run, the loop's checkpoint is from before `generate`; OpenEvolve's own
checkpoint (after every iteration, in `RUN_DIR/openevolve/<loop>/checkpoints/`) is kept, and a
resumed run continues OpenEvolve from it: its population, islands and programs are kept, and the
evaluations are in the cache; LLM answers are reused only for requests identical to recorded
ones (OpenEvolve's prompts show measured metrics, so most are asked again), and the LLM usage of
the iterations before the checkpoint is in the store's exchanges but not in the loop's usage.
OpenEvolve failing ends the loop with its reason (the candidates it made are kept); the rest of
the campaign goes on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langgraph.runtime import get_runtime
from pydantic import BaseModel, ConfigDict, Field

from agentloop.loop.styles.base import Proposal, Proposing, Style
from agentloop.providers import Message, ProviderError

EXTRA_MISSING = "the openevolve style needs OpenEvolve: pip install 'agentloop[openevolve]'"
DRIVER = "agentloop.frameworks.openevolve_run"
"""The module the style runs OpenEvolve's controller in (a process of its own)."""
RESULT_FILE = "agentloop_result.json"
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


def missing_extra() -> str | None:
    """The one-line message when OpenEvolve is not installed, else None."""
    return EXTRA_MISSING if importlib.util.find_spec("openevolve") is None else None


class OpenEvolveSettings(BaseModel):
    """Settings of the openevolve style (the rest of OpenEvolve's configuration under `config`)."""

    model_config = ConfigDict(extra="forbid")
    islands: int = Field(default=2, ge=1)
    """OpenEvolve's islands (separately evolving populations)."""
    population_size: int = Field(default=50, ge=2)
    archive_size: int = Field(default=20, ge=1)
    top_programs: int = Field(default=3, ge=0)
    """Best programs shown in each prompt."""
    diverse_programs: int = Field(default=2, ge=0)
    """Diverse programs shown in each prompt."""
    diff_based: bool = False
    """OpenEvolve's SEARCH/REPLACE diffs; false: full rewrites (any model that answers a whole
    kernel in a python block works)."""
    max_code_length: int = Field(default=20000, ge=100)
    max_tokens: int = Field(default=8192, ge=1)
    """max_tokens OpenEvolve asks for (the campaign's provider options still apply)."""
    llm_timeout_s: int = Field(default=3600, ge=1)
    """How long OpenEvolve waits for one answer (an exchange: provider waits for a person)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Further OpenEvolve configuration (its config.yaml keys), over the style's."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


class OpenEvolveStyle(Style):
    """OpenEvolve's controller for the loop's budget; its programs are the loop's candidates."""

    name = "openevolve"

    def __init__(self, settings: OpenEvolveSettings | None = None) -> None:
        self.settings = settings or OpenEvolveSettings()
        self.ended: str | None = None
        """Why OpenEvolve ended before the budget (the loop then proposes nothing more)."""
        missing = missing_extra()
        if missing:
            raise RuntimeError(missing)

    @property
    def per_round(self) -> int:
        return 1 << 30  # the whole remaining budget in one round: OpenEvolve runs its own loop

    def propose(self, p: Proposing) -> list[Proposal]:
        if self.ended is not None or not p.seeds:
            return []
        ctx = getattr(p, "context", None) or get_runtime().context
        run = _OpenEvolveRun(self.settings, p, ctx)
        proposals, self.ended = run.run()
        return proposals


class _OpenEvolveRun:
    """One run of OpenEvolve's controller for one loop, served over the driver's pipes."""

    def __init__(self, settings: OpenEvolveSettings, p: Proposing, ctx: Any) -> None:
        self.settings, self.p, self.ctx = settings, p, ctx
        self.workdir = Path(ctx.run_dir) / "openevolve" / _slug(f"{ctx.cell.id}--{ctx.task.name}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.started = time.perf_counter()
        self.provider_error: ProviderError | None = None
        self._write_lock = threading.Lock()

    # The job -----------------------------------------------------------------------------
    def job(self) -> tuple[dict[str, Any], int, int]:
        """The driver's job, the candidates before OpenEvolve's first (seeded ones) and the
        OpenEvolve iterations already proposed (a loop that goes on after an ended run)."""
        p, ctx = self.p, self.ctx
        path = self.workdir / "job.json"
        if path.is_file():
            job = json.loads(path.read_text())
            offset = job["offset"]
        else:
            offset = len(p.state.candidates)
            seed = p.state.best(p.bi_aware)
            initial = seed.code if seed is not None and seed.code else ctx.task.reference_path.read_text()
            (self.workdir / "initial_program.py").write_text(initial)
            messages = p.render("coder", plan=None, best=None, attempts=None)
            job = {"offset": offset, "iterations": len(p.seeds) + len(p.state.candidates) - offset,
                   "initial": seed.number if seed is not None and seed.code else None,
                   "seed": p.seeds[0], "model": ctx.cell.provider,
                   "initial_program": str((self.workdir / "initial_program.py").resolve()),
                   "output_dir": str(self.workdir.resolve()),
                   "system_message": "\n\n".join(m.content for m in messages),
                   "settings": self.settings.model_dump(mode="json"),
                   "gates": {"task": ctx.task.name, "mode": p.mode, "device": ctx.device,
                             "settings": ctx.evaluator.settings.model_dump(mode="json")}}
            path.write_text(json.dumps(job, indent=2))
        return job, offset, len(p.state.candidates) - offset

    # Serving the driver ------------------------------------------------------------------
    def _over_budget(self) -> str | None:
        b, state, llm = self.ctx.budget, self.p.state, self.p.llm
        if llm.calls_left() == 0:
            return f"budget: {b.llm_calls} LLM calls"
        usage = getattr(llm, "usage", None)
        if b.tokens is not None and usage is not None and state.usage.tokens + usage.tokens >= b.tokens:
            return f"budget: {b.tokens} tokens"
        if b.wall_s is not None and state.wall_s + time.perf_counter() - self.started >= b.wall_s:
            return f"budget: {b.wall_s:g} s"
        return None

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            if request.get("kind") == "llm":
                spent = self._over_budget()
                if spent:
                    return {"error": spent}
                messages = [Message.model_validate(m) for m in request["messages"]]
                seed = request.get("seed")
                seed = seed if isinstance(seed, int) else self.p.seeds[0]
                completion = self.p.llm.ask("coder", messages, seed)
                return {"completion": completion.model_dump(mode="json")}
            if request.get("kind") == "stage":
                outcome = self.ctx.evaluator.stage(request["code"], self.ctx.task, request["stage"])
                return {"outcome": outcome.model_dump(mode="json")}
            return {"error": f"unknown request kind {request.get('kind')!r}"}
        except ProviderError as exc:
            self.provider_error = self.provider_error or exc
            return {"error": str(exc)}
        except Exception as exc:  # a failed request fails OpenEvolve's iteration, not this loop
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _reply(self, proc: subprocess.Popen, request: dict[str, Any]) -> None:
        reply = {"id": request.get("id"), **self.answer(request)}
        with self._write_lock:
            try:
                proc.stdin.write(json.dumps(reply) + "\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            except (BrokenPipeError, ValueError, OSError):
                pass

    def serve(self, job_path: Path) -> int:
        env = {k: v for k, v in os.environ.items() if not _SECRET.search(k)}  # it needs no keys
        log = (self.workdir / "openevolve.log").open("a")
        proc = subprocess.Popen([sys.executable, "-m", DRIVER, str(job_path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, text=True, cwd=self.workdir, env=env,
                                start_new_session=True)
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True, name="openevolve-read").start()
        workers = ThreadPoolExecutor(4, thread_name_prefix="openevolve-serve")
        try:
            while True:
                try:
                    line = lines.get(timeout=0.25)
                except queue.Empty:
                    if self.ctx.abort.is_set():
                        self.ctx.check()  # RunAborted: the finally below ends OpenEvolve
                    continue
                if line is None:
                    break
                try:
                    request = json.loads(line)
                except json.JSONDecodeError:
                    continue
                workers.submit(self._reply, proc, request)
            return proc.wait()
        finally:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)
                except OSError:
                    pass
                proc.wait()
            workers.shutdown(wait=False, cancel_futures=True)
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            log.close()

    # The run -----------------------------------------------------------------------------
    def run(self) -> tuple[list[Proposal], str | None]:
        job, offset, done = self.job()
        result_path = self.workdir / RESULT_FILE
        result_path.unlink(missing_ok=True)
        status = self.serve(self.workdir / "job.json")
        if self.provider_error is not None:
            raise self.provider_error  # as in every style: the run stops, resumable
        if not result_path.is_file():
            log = self.workdir / "openevolve.log"
            return [], f"OpenEvolve ended without a result (status {status}; its log: {log})"
        result = json.loads(result_path.read_text())
        return self.proposals(result, job, offset, done)

    def proposals(self, result: dict[str, Any], job: dict[str, Any], offset: int,
                  done: int) -> tuple[list[Proposal], str | None]:
        """One proposal per OpenEvolve iteration after the `done` ones, in order, until the first
        iteration that did not run."""
        by_iteration: dict[int, dict[str, Any]] = {}
        for prog in result["programs"]:
            if "_migrant" not in prog["id"] and prog["iteration"] not in by_iteration:
                by_iteration[prog["iteration"]] = prog
        initial = by_iteration.get(0)
        number = {prog["id"]: offset + i for i, prog in by_iteration.items() if i > 0}
        if initial is not None:
            number[initial["id"]] = job.get("initial")
        failures = {int(k): v for k, v in result.get("failures", {}).items()}
        proposals: list[Proposal] = []
        ended = None
        for k, seed in enumerate(self.p.seeds):
            i = done + k + 1
            prog = by_iteration.get(i)
            if prog is not None:
                parent_id = (prog.get("parent_id") or "").split("_migrant")[0]
                score = prog["metrics"].get("combined_score")
                shown = f"{score:.6g}" if isinstance(score, (int, float)) else ""
                proposals.append(Proposal(
                    answer=f"`````python\n{prog['code'].rstrip()}\n`````\n", seed=seed,
                    parent=number.get(parent_id), notes={
                        "openevolve_id": prog["id"], "openevolve_parent": parent_id,
                        "openevolve_iteration": str(i), "openevolve_score": shown}))
            elif i in failures:
                proposals.append(Proposal(
                    answer=f"OpenEvolve iteration {i} produced no program: {failures[i]}", seed=seed,
                    notes={"openevolve_iteration": str(i), "openevolve_error": failures[i][:500]}))
            else:
                reason = result.get("error") or "no reason given"
                ended = f"OpenEvolve ended after {i - 1} iterations: {reason}"
                break
        return proposals, ended
