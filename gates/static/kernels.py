"""Structure of the `@triton.jit` kernels of a candidate file.

For each kernel: which parameters control the order of its floating-point reductions (the extent
of the axis `tl.sum`/`tl.dot`/`tl.cumsum`/`tl.reduce` reduce, the bounds and step of loops that
accumulate, the grid axis a reduction is split across) and which results it accumulates across
programs with atomics. Read from the AST only: the kernel is never compiled.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from gates.static.configs import Autotune, Heuristic

# Block reductions whose result depends on the order of floating-point additions.
SUM_REDUCTIONS = {"sum", "reduce", "cumsum", "cumprod", "associative_scan", "softmax", "xor_sum"}

# Reductions that are exact whatever the order.
EXACT_REDUCTIONS = {"max", "min", "argmax", "argmin"}

# Calls that select or move values without rounding them.
SELECTIONS = {"maximum", "minimum", "where", "max", "min", "argmax", "argmin", "abs", "load", "to", "cast",
              "broadcast_to", "reshape", "view", "trans", "permute", "expand_dims", "join", "split",
              "multiple_of", "max_contiguous", "max_constancy", "full", "zeros", "zeros_like",
              "full_like", "arange", "program_id", "num_programs", "clamp"}

ORDER_FREE_ATOMICS = {"atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor",
                      "atomic_load", "atomic_poll", "atomic_store"}


@dataclass(frozen=True)
class ReductionUse:
    """Parameters (`deps`; `pid:a`/`nprog:a` for grid axis a) that shape one reduction."""

    deps: frozenset[str]
    role: str
    line: int


@dataclass
class Atomic:
    op: str
    line: int
    guards: list[tuple[str, str, object, bool]]
    """(param, comparison, constant, holds) conditions on constexprs under which it runs."""
    counter: bool
    """Adds an integer literal (a ticket counter), which is exact."""
    shared: bool
    """The address does not depend on the program id: every program updates the same place."""
    integer: bool = False
    """The value merged in holds integers (bit patterns, packed keys, tickets): exact in any order."""


@dataclass
class KernelInfo:
    name: str
    line: int
    params: list[str]
    defaults: dict[str, object]
    constexprs: set[str]
    uses: list[ReductionUse] = field(default_factory=list)
    values: list[ReductionUse] = field(default_factory=list)
    """Parameters that enter the arithmetic of stored values (scales, bit manipulation)."""
    branches: list[ReductionUse] = field(default_factory=list)
    """Parameters that choose between branches doing different arithmetic (not just masking)."""
    block_sum_line: int | None = None
    """First order-sensitive block reduction (its tree depends on num_warps)."""
    atomics: list[Atomic] = field(default_factory=list)
    autotune: Autotune | None = None
    heuristics: list[Heuristic] = field(default_factory=list)
    arithmetic: str = ""
    """The body's computation on data with masks, addresses and offsets left out: two kernels
    with the same text differ only in how they index (int32/int64 offsets, masked or not)."""

    def uses_of(self, name: str) -> list[ReductionUse]:
        return [u for u in self.uses if name in u.deps]

    def values_of(self, name: str) -> list[ReductionUse]:
        return [v for v in self.values if name in v.deps]

    def branches_on(self, name: str) -> list[ReductionUse]:
        return [b for b in self.branches if name in b.deps]

    def split_axes(self) -> dict[int, ReductionUse]:
        """Grid axes whose program count sets how a reduction is partitioned (`tl.num_programs`).

        A program id alone does not: with a fixed chunk size, more programs only cover more of
        the axis, and a row's chunks stay where they were."""
        out: dict[int, ReductionUse] = {}
        for use in self.uses:
            for dep in sorted(use.deps):
                if dep.startswith("nprog:"):
                    out.setdefault(int(dep.split(":")[1]), use)
        return out


def dotted(node: ast.AST) -> str:
    """`a.b.c` for an attribute chain, "" otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def is_jit(fn: ast.FunctionDef) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if dotted(target).split(".")[-1] == "jit":
            return True
    return False


def call_leaf(node: ast.Call) -> str:
    return dotted(node.func).split(".")[-1] if dotted(node.func) else ""


@dataclass(frozen=True)
class Update:
    """One assignment inside a loop body, classified once."""

    name: str
    kind: str
    """"sum" (adds into itself), "reset" (does not read itself) or "counter" (adds an int literal)."""


def classify(node: ast.stmt) -> Update | None:
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
            return Update(node.target.id, "counter")
        return Update(node.target.id, "sum") if isinstance(node.op, (ast.Add, ast.Sub)) else None
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        name = node.targets[0].id
        if isinstance(node.value, ast.Call) and call_leaf(node.value) in _FRESH:
            return Update(name, "reset")  # acc = tl.zeros_like(acc): a new accumulation starts
        reads = False
        for n in ast.walk(node.value):
            if isinstance(n, ast.Name) and n.id == name:
                reads = True
            elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)) and _reads(n, name):
                return Update(name, "sum")  # acc + x, acc * alpha + tl.dot(p, v)
            elif isinstance(n, ast.Call) and call_leaf(n) in {"dot", "dot_scaled"} | SUM_REDUCTIONS \
                    and _reads(n, name):
                return Update(name, "sum")  # tl.dot(a, b, acc)
        return None if reads else Update(name, "reset")
    return None


_FRESH = {"zeros", "zeros_like", "full", "full_like"}


def _reads(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def survey(fn: ast.FunctionDef) -> tuple[dict[int, list[Update]], list[ast.Call]]:
    """One pass over a kernel: each loop's updates (by id of the loop node) and every call."""
    loops: dict[int, list[Update]] = {}
    calls: list[ast.Call] = []
    stack: list[tuple[ast.AST, tuple[int, ...]]] = [(fn, ())]
    while stack:
        node, inside = stack.pop()
        if isinstance(node, ast.Call):
            calls.append(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign)) and inside:
            update = classify(node)
            if update is not None:
                for loop in inside:
                    loops[loop].append(update)
        for name in node._fields:
            child = getattr(node, name, None)
            nested = inside
            if isinstance(node, (ast.For, ast.While)) and name in ("body", "orelse"):
                loops.setdefault(id(node), [])
                nested = inside + (id(node),)
            if isinstance(child, list):
                stack.extend((c, nested) for c in child if isinstance(c, ast.AST))
            elif isinstance(child, ast.AST):
                stack.append((child, nested))
    return loops, calls


def survey_loops(node: ast.AST) -> dict[int, list[Update]]:
    return survey(node)[0]  # type: ignore[arg-type]


def accumulators(updates: list[Update], skip: set[str]) -> set[str]:
    """Variables a loop body accumulates into across iterations with order-sensitive sums.
    Variables re-initialised in the body are not carried; max/min updates are exact in any order;
    `skip` names pointers and induction variables."""
    resets = {u.name for u in updates if u.kind == "reset"}
    return {u.name for u in updates if u.kind == "sum" and u.name not in skip} - resets


def arithmetic(body: list[ast.stmt]) -> str:
    """A branch body's computation with load/store arguments left out: branches that differ only
    in masking (`if EVEN_K: tl.load(p) else: tl.load(p, mask=...)`) compare equal."""
    out: list[str] = []
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call) and call_leaf(node) in {"load", "store"}:
            out.append(call_leaf(node))
            continue
        out.append(type(node).__name__)
        if isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, ast.Constant):
            out.append(repr(node.value))
        elif isinstance(node, ast.Attribute):
            out.append(node.attr)
        for name in reversed(node._fields):
            child = getattr(node, name, None)
            if isinstance(child, list):
                stack.extend(c for c in reversed(child) if isinstance(c, ast.AST))
            elif isinstance(child, ast.AST) and not isinstance(child, ast.expr_context):
                stack.append(child)
    return " ".join(out)


def pointer_params(calls: list[ast.Call], params: list[str]) -> set[str]:
    """Parameters used as the base of a load, store, atomic or block pointer."""
    found: set[str] = set()
    for node in calls:
        if node.args and (call_leaf(node) in {"load", "store", "make_block_ptr"}
                          or call_leaf(node).startswith("atomic_")):
            stack = [node.args[0]]
            while stack:
                cur = stack.pop()
                if isinstance(cur, ast.BinOp) and isinstance(cur.op, (ast.Add, ast.Sub)):
                    stack += [cur.left, cur.right]
                elif isinstance(cur, ast.Name) and cur.id in params:
                    found.add(cur.id)
    names_ptr = {p for p in params if p.endswith("ptr") or p.endswith("_ptrs")}
    return found | names_ptr


_MEMORY = ("load", "store", "atomic_", "dot", "make_block_ptr")


def data_part(body: list[ast.stmt], env: dict) -> list[ast.stmt]:
    """The statements of a branch body that compute on data (loaded values, stores, atomics),
    leaving out index, offset and mask computations (`row = row.to(tl.int64)`, `mask = cols < H`)."""
    data = {name for name, value in env.items() if value.data}
    kept = []
    for stmt in body:
        reads = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        memory = any(isinstance(n, ast.Call) and call_leaf(n).startswith(_MEMORY) for n in ast.walk(stmt))
        targets = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        plain = isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Pass))
        if memory or reads & data or not plain:
            kept.append(stmt)
            data |= targets
        else:
            data -= targets
    return kept
