"""`refine`: one agent in one conversation, refining its kernel turn by turn with the feedback
on each candidate."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentloop.loop.styles.base import Proposal, Proposing, Style
from agentloop.providers import Message


class RefineSettings(BaseModel):
    """Settings of the refine style."""

    model_config = ConfigDict(extra="forbid")
    history: int = Field(default=8, ge=1)
    """Earlier candidates kept in the conversation (each as the answer and its feedback)."""


class RefineStyle(Style):
    """The conversation is the coder's prompt, then each earlier answer and its feedback."""

    name = "refine"

    def __init__(self, settings: RefineSettings | None = None) -> None:
        self.settings = settings or RefineSettings()

    def propose(self, p: Proposing) -> list[Proposal]:
        messages = p.render("coder", plan=None, best=None, attempts=None)
        earlier = p.state.candidates[-self.settings.history:]
        for c in earlier:
            messages += [Message(role="assistant", content=c.answer),
                         Message(role="user", content=c.feedback)]
        parent = earlier[-1].number if earlier else None
        proposals = []
        for seed in p.seeds:  # one per round by default; several continue the same conversation
            if p.llm.calls_left() == 0:
                break
            answer = p.llm.ask("coder", messages, seed).text
            proposals.append(Proposal(answer=answer, seed=seed, parent=parent))
        return proposals
