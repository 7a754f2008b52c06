"""What evaluating one candidate produces, stage by stage.

The stages run in this order; the graph has one node per stage and the worker pool runs each
stage of a candidate in a sandboxed worker (the static gate only reads source, so it runs in
the orchestrator). A candidate stops at the first stage that rejects it (in baseline mode the
BI stages only observe: their outcome is recorded, the candidate goes on).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentloop.evaluation.benchmark import BenchmarkResult
from gates.verdict import GateResult

Stage = Literal["compile", "static", "dynamic", "correctness", "benchmark"]
STAGES: tuple[Stage, ...] = ("compile", "static", "dynamic", "correctness", "benchmark")
BI_STAGES: frozenset[Stage] = frozenset({"static", "dynamic"})


STAGE_TIMEOUTS: dict[str, dict[str, float]] = {
    # The CPU interpreter's slowest honest corpus kernel (decode_attention, fixed_chunk_split_kv)
    # takes 32 s in the dynamic gate alone on 2 cores and 111 s beside other work, 12 s in
    # correctness: 240 s and 120 s leave twice that, so one hang costs minutes, not ten.
    "cpu": {"compile": 120.0, "static": 30.0, "dynamic": 240.0, "correctness": 120.0, "benchmark": 600.0},
    "cuda": {"compile": 120.0, "static": 30.0, "dynamic": 300.0, "correctness": 300.0, "benchmark": 600.0},
}
"""Each stage's default wall-clock limit in a worker, by device."""


class EvalSettings(BaseModel):
    """Everything besides the code that decides an evaluation's outcome (part of the cache key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    device: Literal["cpu", "cuda"] = "cpu"
    stage_timeout_s: dict[str, float] = Field(default_factory=lambda: dict(STAGE_TIMEOUTS["cpu"]))
    """Wall-clock limit of each stage in a worker; a stage over it is rejected as timed out
    (default `STAGE_TIMEOUTS` of the device)."""

    @model_validator(mode="before")
    @classmethod
    def _device_timeouts(cls, data: Any) -> Any:
        if isinstance(data, dict) and "stage_timeout_s" not in data:
            data = {**data, "stage_timeout_s": dict(STAGE_TIMEOUTS.get(data.get("device", "cpu"), {}))}
        return data
    cuda_graph: bool = False
    """Benchmark with CUDA-graph replay."""
    compile_reference: bool = False
    """Also time a torch.compile'd reference as a second baseline."""
    production_baselines: bool = True
    """Time the task's production baselines too."""

    def key(self, code_hash: str, task: str) -> str:
        """The evaluation-cache key of one candidate under these settings and this version of
        the evaluating code (a resumed run re-evaluates what a changed gate would judge anew)."""
        blob = json.dumps([code_hash, task, self.model_dump(mode="json"), evaluation_code_version()],
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


@cache
def evaluation_code_version() -> str:
    """A hash of the source that decides an evaluation's outcome: the gates, the stage jobs, the
    benchmark and its timer."""
    here = Path(__file__).parent
    root = here.parents[1]
    files = sorted((root / "gates").rglob("*.py")) + [here / name for name in (
        "benchmark.py", "timer.py", "jobs.py", "pool.py", "stages.py")]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class StageOutcome(BaseModel):
    """The outcome of one stage for one candidate."""

    stage: Stage
    passed: bool = False
    seconds: float = 0.0
    gate: GateResult | None = None
    """The gate's result (compile, static, dynamic, correctness stages)."""
    benchmark: BenchmarkResult | None = None
    """Timings and speedup (benchmark stage)."""
    error: str | None = None
    """One line: why the stage could not run the candidate (timeout, crash, exception)."""


def code_hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()
