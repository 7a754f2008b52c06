"""The graph state of one optimisation loop (one task in one cell): plain data that the SQLite
checkpointer saves after every node, so a killed run resumes where it stopped.

Runtime objects (the pool, the providers, the store, the style) live in the loop's context
(`agentloop.loop.context.LoopContext`), never here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agentloop.evaluation.stages import StageOutcome

Status = Literal["pending", "accepted", "rejected"]

SPEEDUP_TOLERANCE = 0.03
"""Speedups within 3 % of each other count as equal when kernels are ranked by speed (the final
kernel, evolve's elites, the team's kernel to beat): two timings of one kernel differ by a few
percent from run to run (clocks, a shared machine, Triton's interpreter on a CPU), so a smaller
difference says nothing about which kernel is faster, and a choice made on it would flip from
one run to the next."""
CPU_SPEEDUP_TOLERANCE = float("inf")
"""On a CPU every accepted kernel counts as equally fast: Triton's interpreter times Python, not
the kernel (one kernel measured 0.0057x in one demo run and 0.0034x in the next), so the final
kernel there is the earliest eligible one and offline runs keep the same kernels."""


def speedup_tolerance(device: str) -> float:
    """The relative difference below which two speedups measured on `device` count as equal."""
    return CPU_SPEEDUP_TOLERANCE if device == "cpu" else SPEEDUP_TOLERANCE


class Candidate(BaseModel):
    """One proposed kernel and what became of it."""

    number: int
    """1, 2, ... in the order proposed within the loop (the store's `iteration`)."""
    round: int
    """The generate step that proposed it; evolve proposes several per round."""
    seed: int
    parent: int | None = None
    """Number of the candidate it was derived from (evolve's parent, refine's previous turn)."""
    inspirations: list[int] = Field(default_factory=list)
    answer: str
    """The LLM's whole answer (the coder's final one in a team)."""
    code: str | None = None
    """The extracted source; None when the answer held no code."""
    code_hash: str | None = None
    notes: dict[str, str] = Field(default_factory=dict)
    """What a style kept beside the code: the team's plan and review."""
    stages: dict[str, StageOutcome] = Field(default_factory=dict)
    """Outcome of every stage it went through, by stage name."""
    status: Status = "pending"
    rejected_by: str | None = None
    """The stage that rejected it ("extract" when the answer held no code)."""
    feedback: str = ""
    """What the agent is told about it (rendered from prompts/feedback.<mode>.j2)."""
    store_id: int | None = None
    """Its row in the results store, once recorded."""
    origin: str | None = None
    """Where the code came from when no LLM proposed it: "<archive file>#<kernel id>" for a
    kernel the loop was seeded with from the kernel archive (agentloop/results/archive.py)."""

    @property
    def seeded(self) -> bool:
        return self.origin is not None

    def passed(self, stage: str) -> bool | None:
        """Whether a stage passed; None when the stage never ran on it."""
        outcome = self.stages.get(stage)
        return None if outcome is None else outcome.passed

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    @property
    def bi_passed(self) -> bool:
        """Passed both BI gates (whether or not the mode enforced them)."""
        return bool(self.passed("static")) and bool(self.passed("dynamic"))

    @property
    def speedup(self) -> float | None:
        """Geomean speedup of an accepted candidate; None otherwise."""
        outcome = self.stages.get("benchmark")
        if not self.accepted or outcome is None or outcome.benchmark is None:
            return None
        return outcome.benchmark.speedup

    def summary(self) -> str:
        """One line on its outcome, for prompts that list candidates."""
        if self.status == "accepted":
            return f"accepted, {self.speedup:.3g}x speedup"
        if self.status == "pending":
            return "not evaluated yet"
        return "rejected: no code in the answer" if self.rejected_by == "extract" \
            else f"rejected by the {self.rejected_by} stage"


class Usage(BaseModel):
    """LLM use of one loop."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(llm_calls=self.llm_calls + other.llm_calls,
                     input_tokens=self.input_tokens + other.input_tokens,
                     output_tokens=self.output_tokens + other.output_tokens,
                     cost_usd=self.cost_usd + other.cost_usd)


class LoopState(BaseModel):
    """The state of the loop of one task in one cell."""

    task: str
    round: int = 0
    candidates: list[Candidate] = Field(default_factory=list)
    pending: list[int] = Field(default_factory=list)
    """Numbers of this round's candidates still going through the stages."""
    usage: Usage = Field(default_factory=Usage)
    answered: list[str] = Field(default_factory=list)
    """Request hashes of every LLM exchange the loop has used, in order: on resume, a request
    that the store answered beyond these is taken from the store instead of asked again."""
    wall_s: float = 0.0
    """Time spent in the loop's nodes, summed over resumed runs."""
    stop_reason: str | None = None
    final: int | None = None
    """Number of the final kernel (set by the finish node); None when none was eligible."""
    bi_pass: bool | None = None
    """The independent dynamic audit of the final kernel (set by the finish node)."""
    tolerance: float = SPEEDUP_TOLERANCE
    """Speedups within this relative difference count as equal (`speedup_tolerance` of the
    campaign's device, set when the loop starts)."""

    def candidate(self, number: int) -> Candidate:
        return self.candidates[number - 1]

    @property
    def proposed(self) -> int:
        """Candidates the agent proposed (the archive's seeds are not counted)."""
        return sum(not c.seeded for c in self.candidates)

    def eligible(self, bi_aware: bool) -> list[Candidate]:
        """Candidates that may be the final kernel: accepted (correct, benchmarked) and, in
        bi-aware mode, through both BI gates."""
        return [c for c in self.candidates if c.accepted and (c.bi_passed or not bi_aware)]

    def best(self, bi_aware: bool) -> Candidate | None:
        """The final kernel so far: of the eligible candidates, the earliest whose speedup is within
        the loop's `tolerance` of the fastest one's (`fastest`)."""
        return fastest(self.eligible(bi_aware), self.tolerance)


def _speed(c: Candidate) -> float:
    return c.speedup or 0.0


def fastest(candidates: list[Candidate], tolerance: float = SPEEDUP_TOLERANCE) -> Candidate | None:
    """The fastest candidate by a rule that timing noise does not flip: the earliest (lowest
    number) whose speedup is within `tolerance` (relative) of the highest; None for none."""
    if not candidates:
        return None
    top = max(_speed(c) for c in candidates)
    near = [c for c in candidates if _speed(c) > 0 and _speed(c) * (1 + tolerance) >= top]
    return min(near or candidates, key=lambda c: c.number)


def by_speed(candidates: list[Candidate], tolerance: float = SPEEDUP_TOLERANCE) -> list[Candidate]:
    """Candidates fastest first by the rule of `fastest`: the fastest, then the fastest of the
    rest, and so on (speedups within the tolerance keep their order of proposal)."""
    left, ranked = list(candidates), []
    while left:
        pick = fastest(left, tolerance)
        assert pick is not None
        ranked.append(pick)
        left = [c for c in left if c is not pick]
    return ranked
