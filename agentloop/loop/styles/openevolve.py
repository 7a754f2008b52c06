"""`openevolve`: OpenEvolve (`pip install 'agentloop[openevolve]'`) proposes the loop's candidates
with its own evolutionary loop, on the campaign's model and gates.

The style's first round of a loop starts OpenEvolve's controller for the loop's whole remaining
budget (one OpenEvolve iteration per candidate), in a process of its own
(`agentloop.frameworks.openevolve_run`): the task's reference (or the loop's best archived seed)
is the initial program, the prompt's system message is our coder prompt for the task and mode,
the loop's first seed is OpenEvolve's random seed. That process serves OpenEvolve an
OpenAI-compatible endpoint on a free loopback port and a gates evaluator
(`agentloop.frameworks.openevolve_evaluator`, three cascade stages); both ask this style, over
pipes, for what they answer: the loop's LLM (the round's `p.llm`: recorded, reused on resume,
counted in the budget) and the loop's own cached evaluator (the campaign's worker pool:
candidates run caged, never in OpenEvolve's processes). OpenEvolve runs on while the loop's
rounds go by: each round is one OpenEvolve iteration, in order, proposed as soon as OpenEvolve has
checkpointed it (its journal line), with its lineage; an iteration that produced no program is a
proposal without code (rejected at extraction, OpenEvolve's reason in its notes). The graph's
nodes then take it through every stage as any style's candidate (the evaluation cache answers
what OpenEvolve already had evaluated), record, feed back, archive and score it the same way, so
candidates land in the store one by one. OpenEvolve's LLM requests are answered only during a
round (one arriving between two rounds waits for the next; a round ends once the answers it
asked for are in), so every answer is counted in the round that asked it.

Stopped (Ctrl-C, SIGTERM) or killed, the loop keeps its candidates recorded so far and its
checkpoint from before the round it was in; OpenEvolve's process ends with the campaign's (it
ends itself when its pipe closes, with its workers and its endpoint). A resumed run continues
OpenEvolve from its own last checkpoint (`RUN_DIR/openevolve/<loop>/checkpoints/`, written
after every iteration): its programs, islands, archive and best program are kept, iterations the
loop had not yet taken are proposed from the journal, and the evaluations are in the cache. Not
kept: the iterations OpenEvolve had in flight (run again, from newly sampled parents), the random
state of its sampling (seeded again from the loop's seed: a resumed run is not the same run as
an unstopped one) and what else its controller keeps outside its database (early-stopping
counts, token totals); LLM answers are reused only for requests identical to recorded ones
(OpenEvolve's prompts show measured metrics, so most are asked again).
OpenEvolve failing (an exception in its controller, its process dying) ends the loop with its
reason (the candidates it made are kept); the rest of the campaign goes on. A loop that ends
before its budget (its target speedup reached) ends OpenEvolve once its result is stored.
"""

from __future__ import annotations

import importlib.util
import json
import os
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
"""What the driver writes at its end: OpenEvolve's programs and the error that ended it."""
JOURNAL_FILE = "agentloop_iterations.jsonl"
"""Each completed OpenEvolve iteration, one JSON line, written by the driver once it is
checkpointed (the format: `agentloop.frameworks.openevolve_run`)."""
LOST = "OpenEvolve's record of this iteration was lost when its run was stopped"
IDLE_S = 300.0
"""How long OpenEvolve waits on when its loop asks for no next candidate and has not ended (a
round's stages that take long); a later round continues it from its checkpoint."""
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


def missing_extra() -> str | None:
    """The one-line message when OpenEvolve is not installed, else None."""
    return EXTRA_MISSING if importlib.util.find_spec("openevolve") is None else None


class OpenEvolveSettings(BaseModel):
    """Settings of the openevolve style (the rest of OpenEvolve's configuration under `config`).
    Each OpenEvolve iteration is one candidate; a resumed run continues OpenEvolve from its last
    checkpoint (what that keeps: docs/guide.md, section 10)."""

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
    """Further OpenEvolve configuration (its config.yaml keys), over the style's (its evolution
    trace stays on, failed iterations included: the loop learns of those through it)."""


# The driver's journal and checkpoints -------------------------------------------------
def latest_checkpoint(output_dir: Path) -> tuple[int, Path] | None:
    """OpenEvolve's last complete checkpoint in its output directory (iteration, folder), if any."""
    found = [(int(m.group(1)), p) for p in (output_dir / "checkpoints").glob("checkpoint_*")
             if (m := re.fullmatch(r"checkpoint_(\d+)", p.name)) and (p / "metadata.json").is_file()]
    return max(found) if found else None


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The journal's complete lines (a line cut short by a kill is left out)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def program_record(p: dict[str, Any], iteration: int) -> dict[str, Any]:
    """A program's journal line."""
    return {"iteration": iteration, "id": p.get("id"), "parent_id": p.get("parent_id"), "code": p.get("code"),
            "metrics": p.get("metrics") or {}}


def prepare_journal(output_dir: Path) -> int:
    """Make the journal agree with the last checkpoint before OpenEvolve continues from it (or
    starts afresh, without one): the lines of later iterations (none but a kill's) are dropped, a
    checkpointed iteration without its line (killed between the two) gets it from the checkpoint.
    Idempotent; the checkpoint's iteration (0: none)."""
    path = output_dir / JOURNAL_FILE
    last = latest_checkpoint(output_dir)
    done = last[0] if last else 0
    kept: list[dict[str, Any]] = []
    seen: set[int] = set()
    for rec in read_journal(path) if done else []:
        i = rec.get("iteration")
        if isinstance(i, int) and (i > done or i in seen and i > 0):
            continue
        if isinstance(i, int) and i > 0:
            seen.add(i)
        kept.append(rec)
    initial = any(r.get("iteration") == 0 for r in kept)
    if last is not None and (len(seen) < done or not initial):
        saved: dict[int, dict[str, Any]] = {}
        for f in sorted((last[1] / "programs").glob("*.json")):
            try:
                prog = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            i = prog.get("iteration_found")
            if isinstance(i, int) and not (prog.get("metadata") or {}).get("migrant"):
                saved.setdefault(i, prog)
        if not initial and 0 in saved:
            kept.append({"iteration": 0, "id": saved[0].get("id")})
        for i in range(1, done + 1):
            if i not in seen:
                kept.append(program_record(saved[i], i) if i in saved else {"iteration": i, "error": LOST})
        at, keys = 0, []
        for r in kept:  # iteration order; a migrant's line stays after the iteration it followed
            at = r["iteration"] if isinstance(r.get("iteration"), int) else at
            keys.append(at)
        kept = [r for _, r in sorted(zip(keys, kept, strict=True), key=lambda kr: kr[0])]
    text = "".join(json.dumps(r) + "\n" for r in kept)
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return done


def fenced(code: str) -> str:
    """A program as an answer our extraction takes it back from (as the evaluator fences it)."""
    return f"`````python\n{code.rstrip()}\n`````\n"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


class OpenEvolveStyle(Style):
    """OpenEvolve's controller for the loop's budget; its iterations are the loop's candidates."""

    name = "openevolve"

    def __init__(self, settings: OpenEvolveSettings | None = None) -> None:
        self.settings = settings or OpenEvolveSettings()
        self.ended: str | None = None
        """Why OpenEvolve ended before the budget (the loop then proposes nothing more)."""
        self._run: _OpenEvolveRun | None = None
        missing = missing_extra()
        if missing:
            raise RuntimeError(missing)

    @property
    def per_round(self) -> int:
        return 1  # one OpenEvolve iteration per round: recorded as soon as OpenEvolve has made it

    def propose(self, p: Proposing) -> list[Proposal]:
        if self.ended is not None or not p.seeds:
            return []
        ctx = getattr(p, "context", None) or get_runtime().context
        if self._run is None or self._run.retired:  # the loop's first round here, or OpenEvolve was let go
            self._run = _OpenEvolveRun(self.settings, p, ctx)
        proposal, self.ended = self._run.next(p)
        return [proposal] if proposal is not None else []


class _Journal:
    """The style's side of the driver's journal (`openevolve_run.JOURNAL_FILE`), read as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: dict[int, dict[str, Any]] = {}
        self.initial: set[str] = set()
        self.alias: dict[str, str] = {}
        self._pos = 0

    def refresh(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._pos)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # complete lines only
        self._pos += end
        for line in data[:end].splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict):
                continue
            i = rec.get("iteration")
            if "migrant" in rec:
                self.alias[str(rec["migrant"])] = str(rec.get("of"))
            elif i == 0:
                self.initial.add(str(rec.get("id")))
            elif isinstance(i, int) and i > 0:
                self.records.setdefault(i, rec)

    def get(self, iteration: int) -> dict[str, Any] | None:
        if iteration not in self.records:
            self.refresh()
        return self.records.get(iteration)

    def origin(self, program_id: str | None) -> tuple[str, int | None]:
        """The program a migrant copy was made from, and its iteration (0: initial; None: unknown)."""
        pid = str(program_id or "")
        for _ in range(100):
            if pid not in self.alias:
                break
            pid = self.alias[pid]
        if pid in self.initial:
            return pid, 0
        return pid, next((i for i, r in self.records.items() if r.get("id") == pid), None)


class _OpenEvolveRun:
    """One OpenEvolve process for one loop, served over its pipes while the loop's rounds go by."""

    def __init__(self, settings: OpenEvolveSettings, p: Proposing, ctx: Any) -> None:
        self.settings, self.ctx = settings, ctx
        self.workdir = Path(ctx.run_dir).resolve() / "openevolve" / _slug(f"{ctx.cell.id}--{ctx.task.name}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.provider_error: ProviderError | None = None
        self.retired = False
        """Ended by this side (the budget's last iteration taken, or idle): a later round may start
        OpenEvolve again from its checkpoint."""
        self._cond = threading.Condition()
        self._active: tuple[Proposing, float] | None = None
        self._asking = 0
        self._idle_since = time.monotonic()
        self._closing = False
        self._closed = threading.Event()
        self._write_lock = threading.Lock()
        self.job, self.offset = self._job(p)
        prepare_journal(self.workdir)  # before the driver starts: the journal as its checkpoint has it
        self.journal = _Journal(self.workdir / JOURNAL_FILE)
        self.proc: subprocess.Popen | None = None
        """The driver, once a round needs an iteration the journal does not hold yet."""

    def _start(self) -> subprocess.Popen:
        (self.workdir / RESULT_FILE).unlink(missing_ok=True)
        self._log = (self.workdir / "openevolve.log").open("a")
        env = {k: v for k, v in os.environ.items() if not _SECRET.search(k)}  # it needs no keys
        self.proc = subprocess.Popen(
            [sys.executable, "-m", DRIVER, str(self.workdir / "job.json")], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, text=True, cwd=self.workdir, env=env,
            start_new_session=True)
        self._workers = ThreadPoolExecutor(4, thread_name_prefix="openevolve-serve")
        threading.Thread(target=self._read, daemon=True, name="openevolve-read").start()
        threading.Thread(target=self._watch, daemon=True, name="openevolve-watch").start()
        return self.proc

    # The job -----------------------------------------------------------------------------
    def _job(self, p: Proposing) -> tuple[dict[str, Any], int]:
        """The driver's job (written once per loop; its iterations: the budget's, less what the loop
        had proposed before) and the candidates before OpenEvolve's first (seeded ones)."""
        ctx = self.ctx
        path = self.workdir / "job.json"
        if path.is_file():
            job = json.loads(path.read_text())
        else:
            offset = len(p.state.candidates)
            seed = p.state.best(p.bi_aware)
            initial = seed.code if seed is not None and seed.code else ctx.task.reference_path.read_text()
            (self.workdir / "initial_program.py").write_text(initial)
            messages = p.render("coder", plan=None, best=None, attempts=None)
            job = {"offset": offset, "proposed": p.state.proposed,
                   "initial": seed.number if seed is not None and seed.code else None,
                   "seed": p.seeds[0], "model": ctx.cell.provider,
                   "initial_program": str((self.workdir / "initial_program.py").resolve()),
                   "output_dir": str(self.workdir.resolve()),
                   "system_message": "\n\n".join(m.content for m in messages),
                   "settings": self.settings.model_dump(mode="json"),
                   "gates": {"task": ctx.task.name, "mode": p.mode, "device": ctx.device,
                             "settings": ctx.evaluator.settings.model_dump(mode="json")}}
        job["iterations"] = max(0, ctx.budget.iterations - job.get("proposed", 0))
        path.write_text(json.dumps(job, indent=2))
        return job, job["offset"]

    # Serving the driver ------------------------------------------------------------------
    @staticmethod
    def _over_budget(p: Proposing, started: float, budget: Any) -> str | None:
        state, llm = p.state, p.llm
        if llm.calls_left() == 0:
            return f"budget: {budget.llm_calls} LLM calls"
        usage = getattr(llm, "usage", None)
        tokens = budget.tokens
        if tokens is not None and usage is not None and state.usage.tokens + usage.tokens >= tokens:
            return f"budget: {budget.tokens} tokens"
        if budget.wall_s is not None and state.wall_s + time.perf_counter() - started >= budget.wall_s:
            return f"budget: {budget.wall_s:g} s"
        return None

    def answer(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The reply to one request; None (no reply) once this run ends."""
        try:
            if request.get("kind") == "llm":
                with self._cond:  # answered within a round: its LLM counts it
                    while self._active is None and not self._closing:
                        self._cond.wait(0.5)
                    if self._closing:
                        return None
                    p, started = self._active  # type: ignore[misc]
                    self._asking += 1
                try:
                    spent = self._over_budget(p, started, self.ctx.budget)
                    if spent:
                        return {"error": spent}
                    messages = [Message.model_validate(m) for m in request["messages"]]
                    seed = request.get("seed")
                    seed = seed if isinstance(seed, int) else p.seeds[0]
                    completion = p.llm.ask("coder", messages, seed)
                    return {"completion": completion.model_dump(mode="json")}
                finally:
                    with self._cond:
                        self._asking -= 1
                        self._cond.notify_all()
            if request.get("kind") == "stage":
                if self._closing:
                    return None
                outcome = self.ctx.evaluator.stage(request["code"], self.ctx.task, request["stage"])
                return {"outcome": outcome.model_dump(mode="json")}
            return {"error": f"unknown request kind {request.get('kind')!r}"}
        except ProviderError as exc:
            self.provider_error = self.provider_error or exc
            return {"error": str(exc), "stop": True}  # the loop stops; OpenEvolve records nothing more
        except Exception as exc:  # a failed request fails OpenEvolve's iteration, not this loop
            return None if self._closing else {"error": f"{type(exc).__name__}: {exc}"}

    def _reply(self, request: dict[str, Any]) -> None:
        answer = self.answer(request)
        if answer is None or self._closing:
            return
        with self._write_lock:
            try:
                self.proc.stdin.write(json.dumps({"id": request.get("id"), **answer}) + "\n")  # type: ignore[union-attr]
                self.proc.stdin.flush()  # type: ignore[union-attr]
            except (BrokenPipeError, ValueError, OSError):
                pass

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:  # type: ignore[union-attr]
                try:
                    request = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self._workers.submit(self._reply, request)
        except (RuntimeError, ValueError, OSError):  # this run ended
            pass

    def _finished(self) -> bool:
        """The loop has ended (its result is in the store, or the run closed the store)."""
        try:
            return self.ctx.store.finished(self.ctx.cell.id, self.ctx.task.name)
        except Exception:
            return True

    def _watch(self) -> None:
        """End OpenEvolve when the run is stopped, when its loop has ended before the budget (its
        target speedup reached, another budget spent) or has asked for nothing for `IDLE_S`."""
        ticks = 0
        while not self._closed.wait(0.25):
            ticks += 1
            if self.ctx.abort.is_set():
                self.close()
                return
            with self._cond:
                idle = self._active is None
                idle_s = time.monotonic() - self._idle_since
            if idle and (idle_s > IDLE_S or ticks % 4 == 0 and self._finished()):
                self.retired = True
                self.close()

    def close(self, grace_s: float = 0.0) -> None:
        """End the driver, its workers and its endpoint (its whole process group)."""
        with self._cond:
            if self._closed.is_set():
                return
            self._closing = True
            self._closed.set()
            self._cond.notify_all()
        if self.proc is None:
            return
        if grace_s and self.proc.poll() is None:
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, 9)  # its workers too, even after it exited
        except OSError:
            pass
        self.proc.wait()
        self._workers.shutdown(wait=False, cancel_futures=True)
        with self._write_lock:  # its stdout the reading thread reads to its end
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
        self._log.close()

    # The rounds --------------------------------------------------------------------------
    def next(self, p: Proposing) -> tuple[Proposal | None, str | None]:
        """The round's proposal: OpenEvolve's next iteration once it is journaled; or None and why
        OpenEvolve ended without it."""
        i = len(p.state.candidates) - self.offset + 1
        with self._cond:
            self._active = (p, time.perf_counter())
            self._cond.notify_all()
        try:
            while True:
                if self.provider_error is not None:
                    raise self.provider_error  # as in every style: the run stops, resumable
                self.ctx.check()  # RunAborted: the except below ends OpenEvolve
                rec = self.journal.get(i)
                if rec is not None:
                    break
                proc = self.proc or self._start()
                if proc.poll() is not None:
                    self.ctx.check()
                    rec = self.journal.get(i)  # what it wrote before it ended
                    if rec is None:
                        self.close()
                        return None, self._ended(i)
                    break
                with self._cond:
                    self._cond.wait(0.1)
            with self._cond:  # no more answers for this round; those asked in it are counted in it
                self._active = None
                while self._asking and not self.ctx.abort.is_set() and self.provider_error is None:
                    self._cond.wait(0.1)
            self.ctx.check()
            if self.provider_error is not None:
                raise self.provider_error
        except BaseException:
            self.close()
            raise
        finally:
            with self._cond:
                self._active = None
                self._idle_since = time.monotonic()
        if i >= self.job["iterations"]:  # the budget's last: OpenEvolve ends, after its last checkpoint
            self.retired = True
            threading.Thread(target=self.close, kwargs={"grace_s": 10.0}, daemon=True,
                             name="openevolve-end").start()
        return self._proposal(rec, p.seeds[0]), None

    def _ended(self, i: int) -> str:
        result = self.workdir / RESULT_FILE
        reason = None
        if result.is_file():
            try:
                reason = json.loads(result.read_text()).get("error")
            except (OSError, ValueError):
                reason = None
            if not reason:
                reason = "no reason given"
        else:
            status = self.proc.returncode if self.proc is not None else None
            how = f"killed by signal {-status}" if status is not None and status < 0 else f"status {status}"
            log = self.workdir / "openevolve.log"
            text = log.read_text(errors="replace") if log.is_file() else ""
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            last = f"; {lines[-1][:300]}" if lines else ""
            reason = f"its process ended without a result ({how}{last}; its log: {log})"
        return f"OpenEvolve ended after {i - 1} iterations: {reason}"

    def _number(self, program_id: str | None) -> int | None:
        """The loop's candidate number of an OpenEvolve program (the initial: the seed's, if any)."""
        _, iteration = self.journal.origin(program_id)
        if iteration == 0:
            return self.job.get("initial")
        return None if iteration is None else self.offset + iteration

    def _proposal(self, rec: dict[str, Any], seed: int) -> Proposal:
        i = rec["iteration"]
        if rec.get("code") is None:
            error = str(rec.get("error") or "no program")
            return Proposal(answer=f"OpenEvolve iteration {i} produced no program: {error}", seed=seed,
                            notes={"openevolve_iteration": str(i), "openevolve_error": error[:500]})
        parent_id, _ = self.journal.origin(rec.get("parent_id"))
        score = (rec.get("metrics") or {}).get("combined_score")
        shown = f"{score:.6g}" if isinstance(score, (int, float)) else ""
        return Proposal(answer=fenced(rec["code"]), seed=seed, parent=self._number(rec.get("parent_id")),
                        notes={"openevolve_id": str(rec.get("id")), "openevolve_parent": parent_id,
                               "openevolve_iteration": str(i), "openevolve_score": shown})
