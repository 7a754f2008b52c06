"""Test doubles for the loop's tests: a pool that reads outcomes from the candidate's source
instead of running it, a provider played by a Python function, and a loop context built around
them. Real-pool runs live in test_graph.py and test_resume.py."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentloop.evaluation.benchmark import BenchmarkResult, ShapeTiming
from agentloop.evaluation.cache import CachedEvaluator
from agentloop.evaluation.stages import EvalSettings, StageOutcome, code_hash
from agentloop.evaluation.timer import Timing
from agentloop.loop.cell import Budget, Cell
from agentloop.loop.context import LoopContext
from agentloop.loop.styles import make_style
from agentloop.providers import Completion, ExchangeRecorder, Message, Provider, get_provider
from agentloop.results.store import Store
from gates.contract import get_task
from gates.verdict import Counterexample, Finding, GateResult

FIXTURES = Path(__file__).parent / "fixtures" / "loop"
FAKE_CORPUS = FIXTURES / "fake"
REAL_CORPUS = FIXTURES / "real"
_MARK = re.compile(r"^# fake:(.*)$", re.MULTILINE)


def marks(code: str) -> tuple[set[str], float]:
    """The stages a fake corpus source fails and its speedup, from its `# fake:` line."""
    found = _MARK.search(code)
    fields = dict(f.split("=", 1) for f in found.group(1).split()) if found else {}
    return set(filter(None, fields.get("fail", "").split(","))), float(fields.get("speedup", "1.0"))


class FakePool:
    """Stands in for agentloop.evaluation.pool.WorkerPool: each stage's outcome comes from the source's
    `# fake:` line; counts how often each (kernel, stage) is evaluated."""

    size = 2

    def __init__(self, device: str = "cpu", workers: int | None = None) -> None:
        self.device = device
        self.calls: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def evaluate_stage(self, code: str, task, stage: str, settings: EvalSettings) -> StageOutcome:
        with self._lock:
            self.calls[(code_hash(code), stage)] += 1
        failing, speedup = marks(code)
        passed = stage not in failing
        if stage == "benchmark":
            shape = ShapeTiming(dims={"T": 1, "H": 256}, candidate=Timing(median_ms=1.0, n=3),
                                reference=Timing(median_ms=speedup, n=3), speedup=speedup)
            bench = BenchmarkResult(task=task.name, dtype="bfloat16", device="cpu", shapes=[shape],
                                    speedup=speedup if passed else -1.0, correct=passed)
            return StageOutcome(stage=stage, passed=passed, benchmark=bench,
                                error=None if passed else "the re-check on fresh inputs did not pass")
        findings, counterexample = [], None
        if not passed and stage == "static":
            findings = [Finding(rule="BI001", severity="error", line=5, message="split count chosen from T",
                                hint="choose the split from H only")]
        if not passed and stage == "dynamic":
            counterexample = Counterexample(output=0, row=0, batch_size=8, position=3, reference_batch_size=1,
                                            max_abs_diff=1e-3, mismatched_elements=4,
                                            context="batch: batch of 8, probe at position 3")
        if not passed and stage == "correctness":
            findings = [Finding(rule="CR001", severity="error", message="max abs diff 0.5 at T=3",
                                hint="apply the weight")]
        gate = GateResult(gate=stage, passed=passed, findings=findings, counterexample=counterexample)
        return StageOutcome(stage=stage, passed=passed, gate=gate)

    def close(self) -> None:
        pass


class ScriptedProvider(Provider):
    """An LLM played by a function of the conversation; records every request."""

    name = "scripted"

    def __init__(self, answer: Callable[[list[Message]], str], tokens: tuple[int, int] = (0, 0)):
        super().__init__("script")
        self.answer = answer
        self.tokens = tokens
        self.requests: list[list[Message]] = []
        self._lock = threading.Lock()

    def complete(self, messages: list[Message], *, seed: int | None = None) -> Completion:
        with self._lock:
            self.requests.append(list(messages))
        return Completion(text=self.answer(messages), input_tokens=self.tokens[0],
                          output_tokens=self.tokens[1],
                          model="script", provider=self.name)


def replay(corpus: Path = FAKE_CORPUS) -> Provider:
    return get_provider("replay", tasks_dir=str(corpus))


def loop_context(run_dir: Path, *, style: str = "refine", mode: str = "bi-aware",
                 budget: Budget | None = None,
                 providers: dict[str, Provider] | None = None, pool=None, task: str = "rms_norm",
                 store: Store | None = None) -> LoopContext:
    """A loop's context over a fake pool and replay on the fake corpus unless told otherwise."""
    run_dir.mkdir(parents=True, exist_ok=True)
    store = store or Store(run_dir / "results.sqlite")
    provider = replay()
    return LoopContext(
        task=get_task(task), cell=Cell(style=style, mode=mode, provider="replay"), style=make_style(style),
        budget=budget or Budget(iterations=3), evaluator=CachedEvaluator(pool or FakePool(), store,
                                                                         EvalSettings()),
        store=store, recorder=ExchangeRecorder(run_dir), providers=providers or {"coder": provider},
        executor=ThreadPoolExecutor(2), run_dir=run_dir)
