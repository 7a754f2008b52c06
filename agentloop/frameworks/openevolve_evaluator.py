"""The gates as an OpenEvolve evaluator: OpenEvolve loads this module (or the two-line file
`write_evaluator` puts beside its config) as its evaluation file.

Cascade stages, each through the same sandboxed evaluation as our styles (never the candidate in
OpenEvolve's process; the static gate reads its source only):

    evaluate_stage1   compile + the static BI gate
    evaluate_stage2   the dynamic BI gate + correctness (closeness, anti-cheat)
    evaluate_stage3   the benchmark
    evaluate          all of them (OpenEvolve without the cascade)

Metrics: `combined_score` (the speedup once benchmarked; 0 when a stage rejects; 1 after a passed
stage 1 or 2, so the cascade's thresholds let it go on), `correct`, `bi_pass` (every BI stage run
so far passed), `speedup`, `speedup_vs_production`. In bi-aware mode a BI failure rejects; in
baseline mode it is only recorded (bi_pass 0, the cascade goes on). Artifacts: `feedback`, the
words our styles show their LLM (prompts/feedback.<mode>.j2, gate results by gates.feedback;
headed `FEEDBACK_HEADING`, without a loop's candidate number), and `rejected_by`.

Where stages run, from the config (a JSON file, `AGENTLOOP_GATES_CONFIG` or the
`agentloop_gates.json` beside the file OpenEvolve loaded; else `AGENTLOOP_TASK`,
`AGENTLOOP_MODE`, `AGENTLOOP_DEVICE`, `AGENTLOOP_OUT`):
- `server` set (the `openevolve` style): the campaign's own evaluator, through the style's
  driver (`openevolve_run.py`): the campaign's worker pool and evaluation cache;
- else a worker pool in this process (one sandboxed worker) and the evaluation cache in
  `OUT/results.sqlite` (default `./agentloop-gates/`).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentloop.evaluation.cache import CachedEvaluator
from agentloop.evaluation.pool import WorkerPool
from agentloop.evaluation.stages import BI_STAGES, STAGES, EvalSettings, Stage, StageOutcome
from agentloop.loop.nodes import feedback
from agentloop.loop.prompts import Prompts
from agentloop.loop.state import Candidate, LoopState, speedup_tolerance
from agentloop.providers.extract import extract_code
from agentloop.results.store import Store
from gates.contract import Task, get_task

CONFIG_FILE = "agentloop_gates.json"
CASCADE: dict[int, tuple[Stage, ...]] = {1: ("compile", "static"), 2: ("dynamic", "correctness"),
                                         3: ("benchmark",)}
"""Our stages in OpenEvolve's cascade stages."""
CASCADE_THRESHOLDS = [0.5, 0.5]
"""Thresholds that let a passed stage 1 or 2 (combined_score 1) go on and stop a rejected one (0)."""
Mode = Literal["baseline", "bi-aware"]

_EVALUATOR_FILE = '''"""agentloop's gates as OpenEvolve's evaluation file
(agentloop.frameworks.openevolve_evaluator); the task, mode and device are in agentloop_gates.json
beside it."""
from pathlib import Path

from agentloop.frameworks.openevolve_evaluator import Gates

_gates = Gates.from_file(Path(__file__).with_name("agentloop_gates.json"))
evaluate, evaluate_stage1, evaluate_stage2, evaluate_stage3 = (
    _gates.evaluate, _gates.evaluate_stage1, _gates.evaluate_stage2, _gates.evaluate_stage3)
'''


class GatesError(RuntimeError):
    """The evaluator's configuration cannot be used, or its evaluation server failed (one line)."""


@dataclass
class _FeedbackContext:
    """What `agentloop.loop.nodes.feedback` reads of a loop's context."""

    task: Task
    device: str
    mode: Mode
    prompts: Prompts = field(default_factory=Prompts)

    @property
    def bi_aware(self) -> bool:
        return self.mode == "bi-aware"

    @property
    def cell(self) -> _FeedbackContext:  # ctx.cell.mode
        return self


def gate_code(source: str, entry: str) -> str:
    """The code the gates judge: as a style's extraction takes it from an answer holding the file
    (so the loop's evaluation cache answers for it)."""
    return extract_code(f"`````python\n{source}\n`````\n", entry) or source


FEEDBACK_HEADING = "## Feedback on this program"
"""The feedback artifact's first line: a program OpenEvolve evaluates has no number of a loop's
(the template's `candidate N` heading would say `candidate 1` of every one)."""


def unnumbered(text: str) -> str:
    """Feedback as our styles render it, its heading naming no candidate number."""
    first, sep, rest = text.partition("\n")
    if re.fullmatch(r"## Feedback on candidate \d+\s*", first):
        return FEEDBACK_HEADING + sep + rest
    return text


def fenced(code: str) -> str:
    """A program as an answer our extraction takes it back from."""
    return f"`````python\n{code.rstrip()}\n`````\n"


class Gates:
    """The gates on one task in one mode, as OpenEvolve's cascade stages; thread-safe."""

    def __init__(self, task: str | Task, mode: Mode = "bi-aware", device: str = "cpu", *,
                 out: str | Path | None = None, server: str | None = None,
                 settings: EvalSettings | dict | None = None, workers: int = 1) -> None:
        if mode not in ("baseline", "bi-aware"):
            raise GatesError(f"mode {mode!r} is not baseline or bi-aware")
        self.task = task if isinstance(task, Task) else get_task(task)
        self.mode: Mode = mode
        if isinstance(settings, dict):
            settings = EvalSettings.model_validate(settings)
        self.settings = settings or EvalSettings(device=device)  # type: ignore[arg-type]
        self.device = self.settings.device
        self.out = Path(out) if out is not None else Path("agentloop-gates")
        self.server = server.rstrip("/") if server else None
        self.workers = workers
        self._evaluator: CachedEvaluator | None = None
        self._lock = threading.Lock()
        self._fb = _FeedbackContext(self.task, self.device, mode)

    # Configuration ------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {"task": self.task.name, "mode": self.mode, "device": self.device, "out": str(self.out),
                "server": self.server, "settings": self.settings.model_dump(mode="json"),
                "workers": self.workers}

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> Gates:
        if not isinstance(raw, dict) or not raw.get("task"):
            raise GatesError("the gates' config needs a task")
        return cls(raw["task"], raw.get("mode", "bi-aware"), raw.get("device", "cpu"), out=raw.get("out"),
                   server=raw.get("server"), settings=raw.get("settings"),
                   workers=int(raw.get("workers") or 1))

    @classmethod
    def from_file(cls, path: str | Path) -> Gates:
        try:
            return cls.from_config(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            raise GatesError(f"{path}: {exc}") from None

    @classmethod
    def from_env(cls) -> Gates:
        path = os.environ.get("AGENTLOOP_GATES_CONFIG")
        if path:
            return cls.from_file(path)
        task = os.environ.get("AGENTLOOP_TASK")
        if not task:
            raise GatesError("set AGENTLOOP_TASK (and AGENTLOOP_MODE, AGENTLOOP_DEVICE, AGENTLOOP_OUT) or "
                             "AGENTLOOP_GATES_CONFIG for the agentloop evaluator")
        return cls(task, os.environ.get("AGENTLOOP_MODE", "bi-aware"),  # type: ignore[arg-type]
                   os.environ.get("AGENTLOOP_DEVICE", "cpu"), out=os.environ.get("AGENTLOOP_OUT"))

    def write(self, directory: str | Path) -> Path:
        """Write the evaluation file and its config into `directory`; the file's path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_FILE).write_text(json.dumps(self.config(), indent=2) + "\n")
        path = directory / "agentloop_evaluator.py"
        path.write_text(_EVALUATOR_FILE)
        return path

    # Stages -------------------------------------------------------------------------------
    def _local(self) -> CachedEvaluator:
        with self._lock:
            if self._evaluator is None:
                self.out.mkdir(parents=True, exist_ok=True)
                pool = WorkerPool(self.device, self.workers)  # type: ignore[arg-type]
                store = Store(self.out / "results.sqlite")
                atexit.register(pool.close)
                self._evaluator = CachedEvaluator(pool, store, self.settings)
            return self._evaluator

    def stage(self, code: str, stage: Stage) -> StageOutcome:
        """One stage of one kernel: from the campaign's evaluator (server) or the local pool."""
        if self.server is None:
            return self._local().stage(code, self.task, stage)
        body = json.dumps({"code": code, "stage": stage}).encode()
        request = urllib.request.Request(f"{self.server}/agentloop/stage", data=body,
                                         headers={"Content-Type": "application/json"})
        limit = sum(self.settings.stage_timeout_s.values()) + 600  # the pool may be busy with other loops
        try:
            with urllib.request.urlopen(request, timeout=limit) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise GatesError(f"the evaluation server answered {exc.code}: {exc.read()[:300]!r}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise GatesError(f"the evaluation server {self.server} cannot be reached: {exc}") from None
        return StageOutcome.model_validate(answer["outcome"])

    def run(self, code: str, upto: int = 3) -> dict[Stage, StageOutcome]:
        """The stages of cascade stages 1..upto in order, stopping at the first that rejects."""
        outcomes: dict[Stage, StageOutcome] = {}
        for stage in (s for k in range(1, upto + 1) for s in CASCADE[k]):
            outcome = self.stage(code, stage)
            outcomes[stage] = outcome
            if not outcome.passed and (stage not in BI_STAGES or self.mode == "bi-aware"):
                break
        return outcomes

    def result(self, program_path: str | Path, upto: int) -> Any:
        """OpenEvolve's EvaluationResult for cascade stages 1..upto of the program file."""
        from openevolve.evaluation_result import EvaluationResult

        source = Path(program_path).read_text()
        code = gate_code(source, self.task.entry)
        outcomes = self.run(code, upto)
        metrics, artifacts = self.score(code, outcomes, upto)
        return EvaluationResult(metrics=metrics, artifacts=artifacts)

    def score(self, code: str, outcomes: dict[Stage, StageOutcome], upto: int = 3
              ) -> tuple[dict[str, float], dict[str, str]]:
        """Metrics and artifacts of the outcomes (see the module's docstring)."""
        enforced = {s for s in STAGES if s not in BI_STAGES or self.mode == "bi-aware"}
        rejected_by = next((s for s, o in outcomes.items() if not o.passed and s in enforced), None)
        bench = outcomes["benchmark"].benchmark if "benchmark" in outcomes else None
        accepted = rejected_by is None and "benchmark" in outcomes
        correct = 1.0 if accepted else 0.0 if rejected_by in ("correctness", "benchmark") else None
        bi = [o.passed for s, o in outcomes.items() if s in BI_STAGES]
        speedup = bench.speedup if accepted and bench is not None and bench.speedup > 0 else 0.0
        production = bench.production_speedup if accepted and bench is not None else None
        if rejected_by is not None:
            combined = 0.0
        elif accepted:
            combined = speedup
        else:
            combined = 1.0  # passed so far: the cascade goes on
        metrics = {"combined_score": combined, "correct": correct if correct is not None else 0.0,
                   "bi_pass": float(all(bi)) if bi else 0.0, "speedup": speedup,
                   "speedup_vs_production": float(production or 0.0),
                   "stages_passed": float(sum(o.passed for o in outcomes.values()))}
        artifacts: dict[str, str] = {}
        if rejected_by is not None or accepted:
            c = Candidate(number=1, round=1, seed=0, answer=fenced(code), code=code, stages=dict(outcomes),
                          status="accepted" if accepted else "rejected", rejected_by=rejected_by)
            state = LoopState(task=self.task.name, tolerance=speedup_tolerance(self.device))
            artifacts["feedback"] = unnumbered(feedback(c, state, self._fb))  # type: ignore[arg-type]
            artifacts["rejected_by"] = rejected_by or ""
        return metrics, artifacts

    def evaluate_stage1(self, program_path: str) -> Any:
        return self.result(program_path, 1)

    def evaluate_stage2(self, program_path: str) -> Any:
        return self.result(program_path, 2)

    def evaluate_stage3(self, program_path: str) -> Any:
        return self.result(program_path, 3)

    def evaluate(self, program_path: str) -> Any:
        return self.result(program_path, 3)


def write_evaluator(directory: str | Path, task: str, mode: Mode = "bi-aware", device: str = "cpu", *,
                    out: str | Path | None = None, server: str | None = None,
                    settings: EvalSettings | None = None) -> Path:
    """Write an OpenEvolve evaluation file for the task, mode and device into `directory`, with its
    config beside it; its path (OpenEvolve's `evaluation_file`)."""
    return Gates(task, mode, device, out=out, server=server, settings=settings).write(directory)


# This module itself as OpenEvolve's evaluation file: the config from the environment.
_module_gates: Gates | None = None
_module_lock = threading.Lock()


def _gates() -> Gates:
    global _module_gates
    with _module_lock:
        if _module_gates is None:
            _module_gates = Gates.from_env()
        return _module_gates


def evaluate_stage1(program_path: str) -> Any:
    return _gates().evaluate_stage1(program_path)


def evaluate_stage2(program_path: str) -> Any:
    return _gates().evaluate_stage2(program_path)


def evaluate_stage3(program_path: str) -> Any:
    return _gates().evaluate_stage3(program_path)


def evaluate(program_path: str) -> Any:
    return _gates().evaluate(program_path)
