"""What every agent style shares: the proposal it returns and what it may use to make one.

A style only proposes candidates; the graph's nodes evaluate, reject, feed back and stop the
same way for every style.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, Field

from agentloop.loop.prompts import Mode, Prompts
from agentloop.loop.state import Candidate, LoopState
from agentloop.providers import Completion, Message
from gates.contract import Task

Role = Literal["planner", "coder", "reviewer"]
StyleName = Literal["refine", "evolve", "team", "openevolve"]
T = TypeVar("T")
R = TypeVar("R")


class Proposal(BaseModel):
    """One candidate as a style proposes it: the answer the code is taken from, and its lineage."""

    answer: str
    seed: int
    parent: int | None = None
    inspirations: list[int] = Field(default_factory=list)
    notes: dict[str, str] = Field(default_factory=dict)


class Asker(Protocol):
    """The loop's LLM (agentloop.loop.llm.AgentLLM): one call per request, recorded."""

    def ask(self, role: Role, messages: list[Message], seed: int) -> Completion: ...

    def calls_left(self) -> int | None: ...


@dataclass
class Proposing:
    """What a style may use to propose the candidates of one round."""

    state: LoopState
    task: Task
    mode: Mode
    prompts: Prompts
    brief: dict[str, Any]
    """The task as the templates show it (agentloop.loop.prompts.task_brief)."""
    llm: Asker
    seeds: list[int]
    """One seed per candidate to propose this round; its length is how many to propose."""
    context: Any = None
    """The loop's runtime (`agentloop.loop.context.LoopContext`): for a style that runs a framework
    of its own against the loop's evaluator, run directory and stop flag (openevolve)."""

    @property
    def bi_aware(self) -> bool:
        return self.mode == "bi-aware"

    def render(self, role: str, **variables: Any) -> list[Message]:
        return self.prompts.messages(role, self.mode, **self.brief, **variables)

    def turn(self, role: str, **variables: Any) -> Message:
        return self.prompts.turn(role, self.mode, **variables)

    def parallel(self, fn: Callable[[T], R], items: list[T]) -> list[R]:
        """fn over items, at the same time (LLM calls wait on the network), results in order."""
        if len(items) <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="propose") as pool:
            return list(pool.map(fn, items))


def shown(c: Candidate) -> dict[str, Any]:
    """A candidate as prompt templates show it."""
    return {"number": c.number, "summary": c.summary(), "code": c.code or "", "feedback": c.feedback.strip(),
            "speedup": c.speedup}


class Style:
    """An agent style: how candidates are proposed."""

    name: ClassVar[str] = ""

    @property
    def per_round(self) -> int:
        """Candidates proposed per round (evaluated in parallel)."""
        return 1

    def propose(self, p: Proposing) -> list[Proposal]:
        """One proposal per seed in `p.seeds` (fewer only when the LLM-call budget runs out)."""
        raise NotImplementedError
