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
        """The fastest eligible candidate; the earliest among equals."""
        eligible = self.eligible(bi_aware)
        return max(eligible, key=lambda c: (c.speedup or 0.0, -c.number)) if eligible else None
