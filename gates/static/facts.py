"""Facts the host analysis records for the rules: launches, torch ops on batched tensors,
row-mixing values that reach an output, branches on batch-derived values, and calls on batched
rows it could not follow."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from gates.static.values import Origin, Val


def short(node: ast.AST) -> str:
    """Source text of a node, cut to fit in a one-line message."""
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Launch:
    kernel: str
    line: int
    params: dict[str, Val]
    """Kernel parameter -> what the host binds to it (defaults included)."""
    options: dict[str, Val]
    """num_warps, num_stages, ... given at the launch."""
    grid: tuple[Val, ...] | None


@dataclass
class TorchOp:
    op: str
    line: int
    kind: str
    """"gemm" or "reduction"."""
    tensor: str
    """The batched input whose rows the operand holds."""


@dataclass
class CrossRow:
    origin: Origin
    sink_line: int
    sink: str


@dataclass
class Dispatch:
    """A branch on a batch-derived value and the work (launches, torch ops) on each path."""

    line: int
    test: str
    origin: Origin
    paths: list[list[Launch | str]]


@dataclass
class RowArithmetic:
    """Arithmetic between a batched tensor's rows and a batch-derived scalar."""

    line: int
    text: str
    origin: Origin


@dataclass
class Unfollowed:
    """A call on a batched tensor's rows whose callee has no source the analysis can read (an
    extension module, `torch._C`, a name bound to the result of some call)."""

    line: int
    callee: str
    """The call's callee as written."""
    bound: str
    """What the callee is bound to, as far as it is known ("" when nothing is)."""
    tensor: str
    """The batched input whose rows the call receives."""


@dataclass
class HostFacts:
    entry_found: bool = True
    entry_followed: bool = True
    """False when the entry is defined in a way the analysis cannot follow (host facts empty)."""
    entry_bound: str = ""
    """What such an entry is bound to, as far as it is known."""
    launches: list[Launch] = field(default_factory=list)
    torch_ops: list[TorchOp] = field(default_factory=list)
    cross_rows: list[CrossRow] = field(default_factory=list)
    dispatches: list[Dispatch] = field(default_factory=list)
    row_arithmetic: list[RowArithmetic] = field(default_factory=list)
    unfollowed: list[Unfollowed] = field(default_factory=list)

