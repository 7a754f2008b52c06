"""What the gates return: findings, per-gate results and the overall verdict (SPEC.md §3)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Finding(BaseModel):
    """One problem found in a candidate, with a fix hint an LLM can act on."""

    rule: str
    """Stable rule id, e.g. "BI001"."""
    severity: Literal["error", "warning"]
    line: int | None = None
    message: str
    hint: str = ""


class Counterexample(BaseModel):
    """The first batch context in which a row's output bits differed."""

    output: int
    """Index of the output (in return order) that differed."""
    row: int
    """Index of the probe row in the reference context."""
    batch_size: int
    position: int
    """Where the probe row sat in the differing batch."""
    reference_batch_size: int
    max_abs_diff: float | None
    mismatched_elements: int
    context: str = ""
    """How the differing batch was built (co-batched content, permutation, repeat call)."""


class GateResult(BaseModel):
    gate: Literal["compile", "static", "dynamic", "correctness", "anticheat"]
    passed: bool
    seconds: float = 0.0
    findings: list[Finding] = Field(default_factory=list)
    counterexample: Counterexample | None = None
    error: str | None = None
    """Why the gate could not run the candidate (timeout, crash, exception), one line."""
    coverage: str | None = None
    """What the gate swept, compact: e.g. "batch 1-512 (14 sizes), float32" (dynamic) or
    "4 shapes x float32, bfloat16, 2 seeds" (correctness); None for the static gate."""


class Verdict(BaseModel):
    task: str
    candidate: str
    verdict: Literal["accept", "reject"]
    seconds: float
    gates: list[GateResult]
    feedback: str = Field(default="", exclude=True)
    """The rejection rendered for an LLM; not part of the JSON shape of SPEC.md §3."""
    isolation: dict[str, Any] | None = None
    """The cage the candidate ran in (`gates.judge.isolation.runner_isolation`); None when no gate ran it."""
    device: str | None = None
    """Where the gates ran the candidate: "cuda" or "cpu" (Triton's interpreter: not a GPU verdict)."""
