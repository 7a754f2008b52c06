"""OpenEvolve's controller for one loop, in a process of its own:
`python -m agentloop.frameworks.openevolve_run JOB.json` (started by the `openevolve` style).

Its own process because OpenEvolve installs signal handlers (main thread only), forks its
iteration workers and adds handlers to the root logger: none of that may happen inside a
campaign's threads. The loop's LLM and its evaluator stay in the campaign: this process serves an
OpenAI-compatible endpoint on a free loopback port (`endpoint.Endpoint`) whose answers, and the
gates' stage outcomes (`POST /agentloop/stage`, what `openevolve_evaluator.Gates` asks), it asks
the style for over its stdin and stdout (JSON lines):

    this process → the style   {"id": 1, "kind": "llm", "messages": [...], "seed": 7}
                               {"id": 2, "kind": "stage", "code": "...", "stage": "static"}
    the style → this process   {"id": 1, "completion": {...}} | {"id": 2, "outcome": {...}}
                               | {"id": n, "error": "one line"}  (+ "stop": true: the loop stops)

Every iteration OpenEvolve completes is checkpointed (`checkpoints/checkpoint_N`: its database,
islands and archive; after a failed iteration too, which OpenEvolve itself does not checkpoint)
and then appended to `JOURNAL_FILE`, one JSON line: `{"iteration": N, "id", "parent_id", "code",
"metrics"}` for the program it made (admitted to its database or not), `{"iteration": N, "error"}`
for none. Lines `{"iteration": 0, "id"}` name the initial programs and `{"migrant", "of"}` the
copies migration makes, so lineage can be followed. The style reads the journal as it grows:
each iteration's line is one candidate of the loop. A journal line never runs ahead of its
checkpoint, so a job started again in the same directory continues OpenEvolve from the last
checkpoint with the journal as it was there (`prepare_journal`, in the style's module, which
reads the journal). At the end it writes `RESULT_FILE`: OpenEvolve's programs (id, parent,
iteration, code, metrics) and the error that ended the run, if one did. When the style's
process goes away (stdin closes) this process and its workers end.
"""

from __future__ import annotations

import asyncio
import faulthandler
import itertools
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from agentloop.frameworks.endpoint import Endpoint
from agentloop.frameworks.openevolve_evaluator import CASCADE_THRESHOLDS, Gates
from agentloop.loop.styles.openevolve import (
    JOURNAL_FILE,
    RESULT_FILE,
    latest_checkpoint,
    prepare_journal,
    program_record,
    read_journal,
)
from agentloop.providers import Completion, Message, ProviderError

TRACE_FILE = "evolution_trace.jsonl"
FAILURES_FILE = "evolution_trace_failures.jsonl"
"""Where OpenEvolve's tracer writes the iterations that produced no program."""


class StyleLink:
    """Requests to the style over the pipes; thread-safe."""

    def __init__(self, out: Any, inp: Any) -> None:
        self._out = out
        self._inp = inp
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[threading.Event, list[dict]]] = {}
        self.closed = False
        self.stopping = False
        """The style's loop stops (its provider failed): nothing more is checkpointed or journaled,
        so a resumed run asks again what this one could not."""
        threading.Thread(target=self._read, daemon=True, name="style-link").start()

    def _read(self) -> None:
        for line in self._inp:
            try:
                answer = json.loads(line)
            except json.JSONDecodeError:
                continue
            waiting = self._pending.pop(answer.get("id"), None)
            if waiting is not None:
                waiting[1].append(answer)
                waiting[0].set()
        # The style went away (its loop stopped, or its process died): so do we, workers included.
        self.closed = True
        for event, slot in list(self._pending.values()):
            slot.append({"error": "the loop stopped"})
            event.set()
        if os.getpgid(0) == os.getpid():  # our own session (the style starts us so): workers too
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(3)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.closed:
            raise ProviderError("the loop stopped")
        n = next(self._ids)
        event, slot = threading.Event(), []
        self._pending[n] = (event, slot)
        with self._lock:
            self._out.write(json.dumps({"id": n, **request}) + "\n")
            self._out.flush()
        event.wait()
        return slot[0]


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def openevolve_config(job: dict[str, Any], url: str) -> dict[str, Any]:
    """OpenEvolve's configuration for the job: our endpoint as its one model, our gates as a
    three-stage cascade, the loop's seed, a checkpoint after every iteration, the evolution trace
    (failed iterations included), then the style's `config` overrides."""
    s = job["settings"]
    stage_limit = int(sum(job["gates"]["settings"]["stage_timeout_s"].values())) + 600
    base = {
        "max_iterations": job["iterations"], "random_seed": job["seed"], "checkpoint_interval": 1,
        "log_level": "INFO", "log_dir": str(Path(job["output_dir"]) / "logs"), "language": "python",
        "diff_based_evolution": s["diff_based"], "max_code_length": s["max_code_length"],
        "llm": {"api_base": url, "api_key": "agentloop-loopback",
                "models": [{"name": job["model"], "weight": 1.0}],
                "evaluator_models": [], "timeout": s["llm_timeout_s"], "retries": 0, "retry_delay": 0,
                "max_tokens": s["max_tokens"]},
        "prompt": {"system_message": job["system_message"], "num_top_programs": s["top_programs"],
                   "num_diverse_programs": s["diverse_programs"], "include_artifacts": True},
        "database": {"num_islands": s["islands"], "population_size": s["population_size"],
                     "archive_size": s["archive_size"], "in_memory": True, "random_seed": job["seed"]},
        "evaluator": {"timeout": stage_limit, "max_retries": 0, "cascade_evaluation": True,
                      "cascade_thresholds": list(CASCADE_THRESHOLDS), "parallel_evaluations": 1,
                      "use_llm_feedback": False, "enable_artifacts": True},
        "evolution_trace": {"enabled": True, "format": "jsonl", "include_code": True,
                            "include_prompts": False, "include_failures": True, "buffer_size": 1,
                            "output_path": str(Path(job["output_dir"]) / TRACE_FILE)},
    }
    config = _merge(base, s.get("config") or {})
    # The journal's failed iterations come from the tracer: it stays on, failures included.
    config["evolution_trace"] = {**config["evolution_trace"], "enabled": True, "include_failures": True}
    return config


class Journal:
    """The driver's side of the journal: OpenEvolve's calls it watches, and the lines it appends."""

    def __init__(self, path: Path, link: Any) -> None:
        self.path = path
        self.link = link
        self.written = {r["iteration"] for r in read_journal(path) if isinstance(r.get("iteration"), int)}
        self.children: dict[int, dict[str, Any]] = {}
        self.failures: dict[int, str] = {}
        self._lock = threading.Lock()

    def append(self, rec: dict[str, Any]) -> None:
        with self._lock, self.path.open("a") as f:
            f.write(json.dumps(rec) + "\n")

    def watch(self, controller: Any) -> None:
        """Wrap the controller's database add, checkpoint and failure tracing (instance attributes:
        OpenEvolve's own code calls them through the instance)."""
        db, save = controller.database, controller._save_checkpoint
        add = db.add

        def add_recorded(program: Any, *args: Any, **kwargs: Any) -> Any:
            iteration = kwargs.get("iteration", args[0] if args else None)
            metadata = getattr(program, "metadata", None) or {}
            if metadata.get("migrant"):
                self.append({"migrant": program.id, "of": program.parent_id})
            elif iteration is None and getattr(program, "iteration_found", None) == 0:
                self.append({"iteration": 0, "id": program.id})
            elif isinstance(iteration, int) and iteration > 0:
                self.children.setdefault(iteration, program_record(
                    {"id": program.id, "parent_id": program.parent_id, "code": program.code,
                     "metrics": dict(program.metrics or {})}, iteration))
            return add(program, *args, **kwargs)

        def save_and_record(iteration: int) -> None:
            if getattr(self.link, "stopping", False):
                return
            save(iteration)
            with self._lock:
                if iteration in self.written:
                    return
                rec = self.children.get(iteration) or (
                    {"iteration": iteration, "error": self.failures[iteration]}
                    if iteration in self.failures else None)
                if rec is None:  # a final checkpoint for an iteration that did not run
                    return
                self.written.add(iteration)
            self.append(rec)

        db.add = add_recorded
        controller._save_checkpoint = save_and_record
        tracer = controller.evolution_tracer
        if tracer is not None:
            log_failure = tracer.log_failure

            def failure_recorded(*args: Any, **kwargs: Any) -> None:
                log_failure(*args, **kwargs)
                iteration = kwargs.get("iteration", args[0] if args else None)
                error = kwargs.get("error", args[1] if len(args) > 1 else None)
                if isinstance(iteration, int) and iteration > 0:
                    self.failures.setdefault(iteration, str(error or "no program")[:2000])
                    save_and_record(iteration)  # OpenEvolve does not checkpoint a failed iteration

            tracer.log_failure = failure_recorded


def failures(trace: Path) -> dict[int, str]:
    """Iterations that produced no program, and why (OpenEvolve's evolution trace)."""
    out: dict[int, str] = {}
    if not trace.is_file():
        return out
    for line in trace.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[int(rec.get("iteration", -1))] = str(rec.get("error") or "no program")
    return out


def run(job: dict[str, Any], link: StyleLink) -> dict[str, Any]:
    from openevolve.config import Config
    from openevolve.controller import OpenEvolve

    output_dir = Path(job["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)

    def complete(messages: list[Message], seed: int | None) -> Completion:
        answer = link.ask({"kind": "llm", "messages": [m.model_dump() for m in messages], "seed": seed})
        if answer.get("stop"):
            link.stopping = True
        if "error" in answer:
            raise ProviderError(answer["error"])
        return Completion.model_validate(answer["completion"])

    def stage(body: dict[str, Any]) -> dict[str, Any]:
        answer = link.ask({"kind": "stage", "code": body["code"], "stage": body["stage"]})
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return {"outcome": answer["outcome"]}

    result: dict[str, Any] = {"programs": [], "failures": {}, "error": None, "resumed_from": None}
    prepare_journal(output_dir)
    with Endpoint(complete, model=job["model"], routes={"/agentloop/stage": stage}) as endpoint:
        print(f"agentloop: OpenEvolve's endpoint is {endpoint.url}", file=sys.stderr, flush=True)
        gates = Gates.from_config({**job["gates"], "server": f"http://127.0.0.1:{endpoint.port}"})
        evaluation_file = gates.write(output_dir)
        config = Config.from_dict(openevolve_config(job, endpoint.url))
        controller = OpenEvolve(job["initial_program"], str(evaluation_file), config,
                                output_dir=str(output_dir))
        Journal(output_dir / JOURNAL_FILE, link).watch(controller)
        iterations, checkpoint = job["iterations"], None
        last = latest_checkpoint(output_dir)
        if last is not None:
            done, path = last
            iterations, checkpoint = max(0, job["iterations"] - done), str(path)
            result["resumed_from"] = done
            print(f"agentloop: OpenEvolve continues from its checkpoint {done} ({path})", file=sys.stderr,
                  flush=True)
            if iterations == 0:  # all done before the stop: the result is the checkpoint's
                controller.database.load(checkpoint)
        try:
            if iterations > 0:
                asyncio.run(controller.run(iterations=iterations, checkpoint_path=checkpoint))
        except Exception as exc:  # OpenEvolve's own failure ends this loop, with the reason
            result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            traceback.print_exc()
        for p in controller.database.programs.values():
            result["programs"].append({"id": p.id, "parent_id": p.parent_id, "iteration": p.iteration_found,
                                       "code": p.code, "metrics": p.metrics, "generation": p.generation})
        result["failures"] = {str(k): v for k, v in failures(output_dir / FAILURES_FILE).items()}
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0]).read_text())
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where it waits, in the log
    # The protocol keeps the real stdout; anything else printing there (OpenEvolve, its
    # workers) goes to stderr. The requests' answers come in on a copy of stdin, and stdin itself
    # becomes /dev/null: OpenEvolve's forked workers close sys.stdin, which would wait forever
    # for the lock the reading thread holds.
    proto_out = os.fdopen(os.dup(1), "w", buffering=1)
    proto_in = os.fdopen(os.dup(0), "r")
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull)  # noqa: SIM115 - for the process's life
    link = StyleLink(proto_out, proto_in)
    result = run(job, link)
    path = Path(job["output_dir"]) / RESULT_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
