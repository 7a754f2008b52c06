"""The runtime of one loop (one task in one cell): everything its nodes use besides the state.
Not checkpointed: the runner builds it again when a run resumes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentloop.evaluation.cache import CachedEvaluator
from agentloop.loop.cell import Budget, Cell
from agentloop.loop.llm import AgentLLM
from agentloop.loop.prompts import Prompts, task_brief
from agentloop.loop.state import Candidate, LoopState
from agentloop.loop.styles import Style
from agentloop.providers import ExchangeRecorder, Provider
from agentloop.results.archive import Archive, ArchivedKernel
from agentloop.results.store import Store
from gates.contract import Task


class RunAborted(RuntimeError):
    """Another loop of the run failed; this one stops at its next node (its checkpoint stays)."""


@dataclass
class LoopContext:
    """What the nodes of one loop use: the task, the cell, its style and the shared services."""

    task: Task
    cell: Cell
    style: Style
    budget: Budget
    evaluator: CachedEvaluator
    store: Store
    recorder: ExchangeRecorder
    providers: Mapping[str, Provider]
    """Provider of each role ("coder" at least)."""
    executor: ThreadPoolExecutor
    """Evaluates a round's candidates in parallel (the pool bounds the real parallelism)."""
    run_dir: Path
    seed: int = 0
    prompts: Prompts = field(default_factory=Prompts)
    abort: threading.Event = field(default_factory=threading.Event)
    on_candidate: Callable[[LoopContext, LoopState, Candidate], Any] | None = None
    """Called when a candidate is accepted or rejected (progress display)."""
    on_stage: Callable[[LoopContext, str], Any] | None = None
    """Called when a node starts, with what it does (progress display)."""
    archive: Archive | None = None
    """Where accepted kernels are archived (None: not recorded)."""
    seeds: list[ArchivedKernel] = field(default_factory=list)
    """Archived kernels the loop starts from, fastest first."""
    campaign_name: str = ""
    brief: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.brief = task_brief(self.task, self.evaluator.settings.device)

    @property
    def bi_aware(self) -> bool:
        return self.cell.mode == "bi-aware"

    @property
    def device(self) -> str:
        return self.evaluator.settings.device

    def llm(self, state: LoopState) -> AgentLLM:
        """The LLM for one node, knowing which answers the checkpointed state has used."""
        return AgentLLM(self.providers, self.store, self.recorder, cell=self.cell.id, task=self.task.name,
                        answered=state.answered, usage=state.usage, max_calls=self.budget.llm_calls)

    def seed_for(self, number: int) -> int:
        """The sampling seed of candidate `number`: fixed by the campaign seed and the number."""
        return self.seed * 1_000_003 + number

    def report_stage(self, what: str) -> None:
        if self.on_stage is not None:
            self.on_stage(self, what)

    def check(self) -> None:
        if self.abort.is_set():
            raise RunAborted("the run was stopped")
