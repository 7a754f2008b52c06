"""`evolve`: a population of kernels. Each round, several children are proposed at once, each
from a parent taken among the elites (the best so far) and a few inspirations chosen for
diversity (different outcomes from the parent's and from each other's). Kernels are ranked by
their verdicts and by speed with the final kernel's tolerance, never by raw timings, so a
repeated run picks the same parents."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentloop.evaluation.stages import STAGES
from agentloop.loop.state import SPEEDUP_TOLERANCE, Candidate, by_speed
from agentloop.loop.styles.base import Proposal, Proposing, Style, shown


class EvolveSettings(BaseModel):
    """Settings of the evolve style."""

    model_config = ConfigDict(extra="forbid")
    per_round: int = Field(default=2, ge=1)
    """Children proposed (and evaluated in parallel) per round."""
    elites: int = Field(default=2, ge=1)
    """Best distinct kernels that parents are taken from, in turn."""
    inspirations: int = Field(default=2, ge=0)
    """Other kernels shown beside the parent."""


def fitness(c: Candidate, bi_aware: bool) -> tuple:
    """The class of a kernel in the population, better first: eligible as a final kernel, then
    how far through the stages it got (speed and age order kernels within a class: `rank`)."""
    eligible = c.accepted and (c.bi_passed or not bi_aware)
    reached = len(STAGES) if c.accepted else (STAGES.index(c.rejected_by) if c.rejected_by in STAGES else -1)
    return (eligible, reached)


def rank(candidates: list[Candidate], bi_aware: bool,
         tolerance: float = SPEEDUP_TOLERANCE) -> list[Candidate]:
    """Kernels best first: by `fitness`, then by speed as the final kernel is chosen
    (`agentloop.loop.state.by_speed`: speedups within its tolerance count as equal, so timing
    noise does not change the parents), then older first."""
    classes: dict[tuple, list[Candidate]] = {}
    for c in sorted(candidates, key=lambda c: c.number):
        classes.setdefault(fitness(c, bi_aware), []).append(c)
    return [c for key in sorted(classes, reverse=True) for c in by_speed(classes[key], tolerance)]


def niche(c: Candidate) -> tuple:
    """What kind of outcome a kernel had: inspirations cover different ones."""
    return (c.status, c.rejected_by, c.bi_passed)


class EvolveStyle(Style):
    name = "evolve"

    def __init__(self, settings: EvolveSettings | None = None) -> None:
        self.settings = settings or EvolveSettings()

    @property
    def per_round(self) -> int:
        return self.settings.per_round

    def population(self, p: Proposing) -> list[Candidate]:
        """Kernels with code, one per distinct source (the first proposed), best first."""
        seen: set[str] = set()
        distinct = []
        for c in p.state.candidates:
            if c.code_hash and c.code_hash not in seen and c.status != "pending":
                seen.add(c.code_hash)
                distinct.append(c)
        return rank(distinct, p.bi_aware, p.state.tolerance)

    def inspirations(self, ranked: list[Candidate], parent: Candidate) -> list[Candidate]:
        """Up to `inspirations` kernels besides the parent: the best of each outcome the parent
        and the others chosen do not have, then the best of the rest."""
        others = [c for c in ranked if c.number != parent.number]
        chosen: list[Candidate] = []
        covered = {niche(parent)}
        for c in others:
            if len(chosen) < self.settings.inspirations and niche(c) not in covered:
                chosen.append(c)
                covered.add(niche(c))
        for c in others:
            if len(chosen) < self.settings.inspirations and c not in chosen:
                chosen.append(c)
        return chosen

    def propose(self, p: Proposing) -> list[Proposal]:
        ranked = self.population(p)
        seeds = p.seeds[:p.llm.calls_left()] if p.llm.calls_left() is not None else p.seeds
        if not ranked:  # the first round: independent drafts
            messages = p.render("coder", plan=None, best=None, attempts=None)
            draft = lambda seed: Proposal(answer=p.llm.ask("coder", messages, seed).text, seed=seed)
            return p.parallel(draft, seeds)
        elites = ranked[:self.settings.elites]

        def child(slot: int) -> Proposal:
            parent = elites[slot % len(elites)]
            inspirations = self.inspirations(ranked, parent)
            messages = p.render("evolve", parent=shown(parent), inspirations=[shown(c) for c in inspirations])
            answer = p.llm.ask("coder", messages, seeds[slot]).text
            return Proposal(answer=answer, seed=seeds[slot], parent=parent.number,
                            inspirations=[c.number for c in inspirations])

        return p.parallel(child, list(range(len(seeds))))
