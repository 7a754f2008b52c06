"""`team`: a planner proposes an optimisation plan, a coder writes the kernel, a reviewer
critiques the draft before it is evaluated and, unless it approves, the coder revises it.
Each role may use its own model (the campaign's `roles`). The coder sees the plan and the
review without their code blocks (the templates' `without_code` filter): the kernel is its job.
The planner sees what the evaluation said about the latest candidate, the coder the latest few
kernels with their verdicts, so a rejected kernel is fixed rather than handed in again."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from agentloop.loop.styles.base import Proposal, Proposing, Style, shown
from agentloop.providers import Message
from agentloop.providers.extract import extract_code

_VERDICT = re.compile(r"^\W*verdict\W*:?\W*(approve|revise)\b", re.IGNORECASE | re.MULTILINE)


class TeamSettings(BaseModel):
    """Settings of the team style."""

    model_config = ConfigDict(extra="forbid")
    per_round: int = Field(default=1, ge=1)
    """Kernels the team proposes (and has evaluated in parallel) per round."""
    review: bool = True
    """Have the reviewer critique each draft before evaluation."""
    history: int = Field(default=8, ge=0)
    """Earlier candidates the planner is told about."""
    attempts: int = Field(default=3, ge=0)
    """Latest candidates the coder is shown with their code and feedback (the best one is shown
    apart, as the kernel to beat)."""


def review_verdict(review: str) -> str:
    """"approve" or "revise" from the reviewer's `verdict:` line; no such line means revise."""
    found = _VERDICT.search(review)
    return found.group(1).lower() if found else "revise"


class TeamStyle(Style):
    name = "team"

    def __init__(self, settings: TeamSettings | None = None) -> None:
        self.settings = settings or TeamSettings()

    @property
    def per_round(self) -> int:
        return self.settings.per_round

    def propose(self, p: Proposing) -> list[Proposal]:
        best = p.state.best(p.bi_aware)
        earlier = p.state.candidates[-self.settings.history:] if self.settings.history else []
        history = [shown(c) for c in earlier]
        # What the gates said about the latest candidates (the best is shown apart), so that a
        # rejected kernel is fixed rather than handed in again: the planner gets the last verdict,
        # the coder the last few kernels with their verdicts.
        recent = p.state.candidates[-self.settings.attempts:] if self.settings.attempts else []
        attempts = [shown(c) for c in recent if c.code and (best is None or c.number != best.number)]
        last = shown(p.state.candidates[-1]) if p.state.candidates else None

        def one(seed: int) -> Proposal | None:
            # A team needs at least the planner and the coder; the review is skipped when the
            # LLM-call budget cannot pay for it and a revision.
            left = p.llm.calls_left()
            if left is not None and left < 2:
                return None
            plan = p.llm.ask("planner", p.render("planner", history=history, last=last), seed).text
            coder = p.render("coder", plan=plan, best=shown(best) if best else None, attempts=attempts)
            answer = p.llm.ask("coder", coder, seed).text
            notes = {"plan": plan}
            draft = extract_code(answer, p.task.entry)
            left = p.llm.calls_left()
            if self.settings.review and draft is not None and (left is None or left >= 2):
                review = p.llm.ask("reviewer", p.render("reviewer", draft=draft), seed).text
                notes["review"] = review
                notes["verdict"] = review_verdict(review)
                if notes["verdict"] == "revise":
                    revision = coder + [Message(role="assistant", content=answer),
                                        p.turn("revise", review=notes["review"])]
                    revised = p.llm.ask("coder", revision, seed).text
                    if extract_code(revised, p.task.entry) is not None:  # else the draft stands
                        answer = revised
            return Proposal(answer=answer, seed=seed, parent=best.number if best else None, notes=notes)

        # Members of one round share the budget: run them one after another when it is tight.
        tight = p.llm.calls_left() is not None
        proposals = [one(s) for s in p.seeds] if tight else p.parallel(one, p.seeds)
        return [x for x in proposals if x is not None]
