"""Agent styles: how candidates are proposed. Every style plugs into the same graph nodes."""

from __future__ import annotations

from typing import Any

from agentloop.loop.styles.base import Proposal, Proposing, Role, Style, StyleName
from agentloop.loop.styles.evolve import EvolveSettings, EvolveStyle
from agentloop.loop.styles.openevolve import OpenEvolveSettings, OpenEvolveStyle
from agentloop.loop.styles.refine import RefineSettings, RefineStyle
from agentloop.loop.styles.team import TeamSettings, TeamStyle

STYLES: dict[str, type[Style]] = {"refine": RefineStyle, "evolve": EvolveStyle, "team": TeamStyle,
                                  "openevolve": OpenEvolveStyle}
DEFAULT_STYLES: tuple[str, ...] = ("refine", "evolve", "team")
"""The styles of a campaign that names none (openevolve needs its extra: it is asked for by name)."""
ROLES: tuple[Role, ...] = ("planner", "coder", "reviewer")


def make_style(name: str, settings: Any = None) -> Style:
    """The style registered under a name, with its settings (None: the defaults)."""
    if name not in STYLES:
        raise ValueError(f"unknown style {name!r}; styles are {', '.join(STYLES)}")
    return STYLES[name](settings)


__all__ = ["DEFAULT_STYLES", "ROLES", "STYLES", "EvolveSettings", "EvolveStyle", "OpenEvolveSettings",
           "OpenEvolveStyle", "Proposal", "Proposing", "RefineSettings", "RefineStyle", "Role", "Style",
           "StyleName", "TeamSettings", "TeamStyle", "make_style"]
