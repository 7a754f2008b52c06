"""What one loop is run for: its cell (style, mode, provider) and its budget, as a campaign file
states them (`agentloop.campaign.file`) and the loop's nodes read them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentloop.loop.prompts import Mode
from agentloop.loop.styles.base import StyleName


class Budget(BaseModel):
    """When one loop (one task in one cell) stops: the first limit reached ends it."""

    model_config = ConfigDict(extra="forbid")

    iterations: int = Field(default=6, ge=1)
    """Candidates the agent may propose."""
    llm_calls: int | None = Field(default=None, ge=1)
    """LLM calls (a team spends several per candidate)."""
    tokens: int | None = Field(default=None, ge=1)
    """Input plus output tokens."""
    wall_s: float | None = Field(default=None, gt=0)
    """Seconds spent in the loop (summed over resumed runs)."""
    target_speedup: float | None = Field(default=None, gt=0)
    """Stop once the final kernel would reach this speedup over the reference."""


class Cell(BaseModel):
    """One (style, mode, provider) combination of a campaign."""

    model_config = ConfigDict(frozen=True)
    style: StyleName
    mode: Mode
    provider: str

    @property
    def id(self) -> str:
        """How the results store names the cell."""
        return f"{self.style}/{self.mode}/{self.provider}"
