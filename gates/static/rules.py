"""The static gate's rules: small functions with stable ids, each turning analysis facts into
findings with a line and a fix hint an LLM can act on. Proved hazards are errors, possible ones
(vendor ops, autotuning keyed on the batch) warnings; see `POSSIBLE`."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gates.contract import Task
from gates.static.facts import HostFacts, Launch
from gates.static.kernels import ORDER_FREE_ATOMICS, KernelInfo
from gates.static.values import flat_batch
from gates.verdict import Finding


@dataclass
class Analysis:
    """Everything the rules look at for one candidate."""

    task: Task
    kernels: dict[str, KernelInfo]
    host: HostFacts
    tree: ast.Module | None = None
    """The module as analysed (helpers inlined), for the rules that read its syntax
    (`gates.static.introspection`)."""


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    hint: str
    check: Callable[[Analysis], Iterator[tuple]]
    """Yields (line, message) for each place the rule fires, or (line, message, "warning") for a
    possible hazard (see `POSSIBLE`)."""
    note: str = ""
    """Appended to the rule's warnings (the batch rules: `POSSIBLE`)."""


RULES: dict[str, Rule] = {}


def rule(rule_id: str, title: str, hint: str, note: str | None = None):
    def register(fn):
        RULES[rule_id] = Rule(rule_id, title, hint, fn, POSSIBLE if note is None else note)
        return fn
    return register


POSSIBLE = (" This is a possible hazard, not a proved one: whether the library or the tuner really "
            "changes strategy with the batch is for the dynamic gate to show, so it is a warning.")
"""Appended to a warning. Severity policy: a finding whose mechanism provably changes a row's
reduction order, code path or inputs with the batch (a block, split or loop bound from T, a branch
on T between different code, a float atomic, a batch-wide statistic) is an error; one that only may
(a vendor op, autotuning keyed on T) is a warning, which the dynamic gate confirms or not."""


def run_rules(analysis: Analysis) -> list[Finding]:
    """Every rule's findings, without repeats, sorted by line."""
    seen: set[tuple[str, int | None, str]] = set()
    findings = []
    for r in RULES.values():
        for line, message, *severity in r.check(analysis):
            level = severity[0] if severity else "error"
            if level == "warning":
                message += r.note
            if (r.id, line, message) not in seen:
                seen.add((r.id, line, message))
                findings.append(Finding(rule=r.id, severity=level, line=line, message=message, hint=r.hint))
    return sorted(findings, key=lambda f: (f.line or 0, f.rule))


def _launched(a: Analysis) -> list[KernelInfo]:
    names = list(dict.fromkeys(launch.kernel for launch in a.host.launches))
    return [a.kernels[n] for n in names] if names else list(a.kernels.values())


def _relevant_params(k: KernelInfo) -> set[str]:
    """Parameters that shape a row's reduction or choose the kernel's code path."""
    return {p for p in k.params if k.uses_of(p) or k.branches_on(p)}


def _batch_params(a: Analysis):
    """(launch, kernel, parameter, origin) for every kernel argument derived from the batch size."""
    for launch in a.host.launches:
        k = a.kernels[launch.kernel]
        for param in sorted(launch.params):
            origin = flat_batch(launch.params[param])
            if origin:
                yield launch, k, param, origin


# -- BI001 -------------------------------------------------------------------------------------
@rule("BI001", "batch-derived value controls reduction tiling or split count",
      "Choose every block size, loop bound and split count along the reduced axis from the reduced "
      "dimension and constants only (e.g. BLOCK_K = 64, SPLIT = 1, or BLOCK_H = "
      "triton.next_power_of_2(H)), never from the batch size T = x.shape[0] or the padded length; "
      "let the batch size change only the grid and the row tiling.")
def reduction_from_batch(a: Analysis):
    for launch, k, param, origin in _batch_params(a):
        uses = k.uses_of(param)
        if uses:
            yield launch.line, (f"`{param}` of kernel `{k.name}` is derived from the batch size via "
                                f"{origin.describe()} and sets the {uses[0].role} (line {uses[0].line}); "
                                f"rows are reduced in a different order at different batch sizes")
    for launch in a.host.launches:
        k = a.kernels[launch.kernel]
        warps = launch.options.get("num_warps")
        if warps is not None and flat_batch(warps) and k.block_sum_line:
            yield launch.line, (f"num_warps of kernel `{k.name}` is derived from the batch size via "
                                f"{flat_batch(warps).describe()} and changes the reduction tree of the "
                                f"block reduction at line {k.block_sum_line}")
        for axis, use in sorted(k.split_axes().items()):
            if launch.grid and axis < len(launch.grid) and flat_batch(launch.grid[axis]):
                yield launch.line, (f"grid axis {axis} of kernel `{k.name}` splits the reduction at line "
                                    f"{use.line} and its size is derived from the batch size via "
                                    f"{flat_batch(launch.grid[axis]).describe()}: the split count changes "
                                    f"with the batch")
    for d in a.host.dispatches:
        if len({_path_work(a, p) for p in d.paths}) != 1:
            continue  # BI004 reports it
        for kernel, param in _differing_reduction_args(a, d.paths):
            yield d.line, (f"the branch `{d.test}` (line {d.line}) depends on the batch size and launches "
                           f"`{kernel}` with a different `{param}`, which shapes how a row is reduced")


def _differing_reduction_args(a: Analysis, paths: list[list]) -> Iterator[tuple[str, str]]:
    launches: dict[str, list[Launch]] = {}
    for path in paths:
        for effect in path:
            if isinstance(effect, Launch):  # twins (same arithmetic, other indexing) together
                launches.setdefault(a.kernels[effect.kernel].arithmetic or effect.kernel, []).append(effect)
    for group in launches.values():
        kernel = group[0].kernel
        k = a.kernels[kernel]
        relevant = sorted(_relevant_params(k)) + (["num_warps"] if k.block_sum_line else [])
        for param in relevant:
            values = [(launch.params | launch.options).get(param) for launch in group]
            if any(v != values[0] for v in values[1:]):
                yield kernel, param


# -- BI002 -------------------------------------------------------------------------------------
@rule("BI002", "autotune or heuristics keyed on the batch size change the reduction",
      "Remove batch-derived arguments (M, T, n_rows, the padded length) from the autotune `key` and from "
      "heuristics, or make every config identical in the reduction parameters (BLOCK_K, SPLIT_K, the "
      "block along the reduced axis, and num_warps for tl.sum kernels) so configs differ only in "
      "parallel tiling (BLOCK_M/BLOCK_N).")
def tuned_on_batch(a: Analysis):
    for launch in a.host.launches:
        k = a.kernels[launch.kernel]
        if k.autotune is not None:
            keys = [key for key in k.autotune.keys if _batch_origin(launch, key)]
            varying = k.autotune.varying()
            relevant = sorted(n for n in varying if _shapes_reduction(k, n))
            if keys and relevant:
                origin = _batch_origin(launch, keys[0])
                yield k.autotune.line, (
                    f"@triton.autotune on `{k.name}` is keyed on `{keys[0]}`, derived from the batch size "
                    f"via {origin.describe()} (launch at line {launch.line}), and its configs differ in "
                    f"{', '.join(relevant)}, which shape the reduction: the tuner may pick a different "
                    f"reduction order for different batch sizes."), "warning"
        for h in k.heuristics:
            reads = [r for r in sorted(h.reads) if _batch_origin(launch, r)]
            uses = k.uses_of(h.param) + k.branches_on(h.param)
            if reads and _shapes_reduction(k, h.param):
                origin = _batch_origin(launch, reads[0])
                role = uses[0].role if uses else "reduction tree of tl.sum"
                yield h.line, (f"@triton.heuristics sets `{h.param}` of `{k.name}` from `{reads[0]}`, "
                               f"derived from the batch size via {origin.describe()}, and `{h.param}` "
                               f"sets the {role}")


def _shapes_reduction(k: KernelInfo, name: str) -> bool:
    """Whether a kernel argument or launch option changes how a row is computed."""
    return bool(k.uses_of(name) or k.branches_on(name) or (name == "num_warps" and k.block_sum_line))


def _batch_origin(launch: Launch, param: str):
    """Where the value a launch binds to `param` became batch-derived, if it did."""
    value = launch.params.get(param)
    return flat_batch(value) if value is not None else None


# -- BI003 -------------------------------------------------------------------------------------
_COMPARE = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le,
            "Gt": operator.gt, "GtE": operator.ge}


def _reachable(atomic, launches: list[Launch]) -> bool:
    """False only when every launch binds constexprs that rule out the atomic's branch."""
    if not atomic.guards or not launches:
        return True
    for launch in launches:
        ok = True
        for param, op, const, holds in atomic.guards:
            value = launch.params.get(param)
            if value is not None and value.known and op in _COMPARE:
                try:
                    if bool(_COMPARE[op](value.const, const)) != holds:
                        ok = False
                except TypeError:
                    pass
        if ok:
            return True
    return False


@rule("BI003", "atomic accumulation into outputs",
      "Do not accumulate with tl.atomic_add (or a lock): give each program its own slot in a workspace "
      "(e.g. partial[row, split]) and reduce the slots in a fixed order in one program or a second "
      "kernel, or keep the whole reduction of a row inside one program.")
def atomics(a: Analysis):
    for k in _launched(a):
        launches = [launch for launch in a.host.launches if launch.kernel == k.name]
        for atomic in k.atomics:
            if atomic.op in ORDER_FREE_ATOMICS or atomic.counter or atomic.integer \
                    or not _reachable(atomic, launches):
                continue
            yield atomic.line, (f"`tl.{atomic.op}` in kernel `{k.name}` accumulates partial results from "
                                f"several programs; they arrive in a different order from run to run and "
                                f"with the batch, so the floating-point sum changes")


# -- BI004 -------------------------------------------------------------------------------------
def _path_names(path: list) -> frozenset[str]:
    return frozenset(f"kernel `{e.kernel}`" if isinstance(e, Launch) else f"`{e}`" for e in path)


def _path_work(a: Analysis, path: list) -> frozenset[str]:
    """What a path computes: kernels by their arithmetic (an int64-offset or unmasked twin of a
    kernel computes the same values), torch ops by name."""
    return frozenset(a.kernels[e.kernel].arithmetic or e.kernel if isinstance(e, Launch) else e for e in path)


def _describe(names: frozenset[str]) -> str:
    return ", ".join(sorted(names)) if names else "no kernel or torch op"


@rule("BI004", "batch-dependent dispatch between kernels or code paths",
      "Use one kernel with one reduction strategy for every batch size; a branch on the batch size may "
      "only change the grid or the number of rows per program, never which kernel, torch op, code path "
      "inside a kernel or reduction order computes a row.")
def dispatch_on_batch(a: Analysis):
    for launch, k, param, origin in _batch_params(a):
        branches = k.branches_on(param)
        if branches:
            yield launch.line, (f"`{param}` of kernel `{k.name}` is derived from the batch size via "
                                f"{origin.describe()} and selects the code path at line "
                                f"{branches[0].line} of the kernel, so rows are computed differently "
                                f"at different batch sizes")
    for d in a.host.dispatches:
        names = [_path_names(p) for p in d.paths]
        if len(set(names)) > 1 and len({_path_work(a, p) for p in d.paths}) > 1:
            shown = " vs ".join(_describe(n) for n in names[:3])
            yield d.line, (f"the branch `{d.test}` depends on the batch size via {d.origin.describe()} and "
                           f"runs different code on each path ({shown}), so a row's result depends on the "
                           f"batch it is in")


# -- BI005 -------------------------------------------------------------------------------------
@rule("BI005", "vendor op with batch-dependent heuristics on a batched tensor",
      "Replace the torch/cuBLAS call on the batched tensor with a Triton kernel of fixed configuration "
      "(constant block sizes along the reduced axis, one program per row or row tile, no split-K); "
      "elementwise torch ops and reductions over unbatched tensors such as the weight are fine.")
def vendor_ops(a: Analysis):
    for op in a.host.torch_ops:
        if op.kind == "gemm":
            yield op.line, (f"`{op.op}` on batched tensor `{op.tensor}` runs a library GEMM whose tile shape "
                            f"and split-K are chosen from the problem size, so a row's result may depend on "
                            f"the batch size."), "warning"
        else:
            yield op.line, (f"`{op.op}` over batched tensor `{op.tensor}` runs a library reduction whose "
                            f"strategy (block size, split across blocks) may depend on the number of "
                            f"rows."), "warning"


# -- BI006 -------------------------------------------------------------------------------------
@rule("BI006", "cross-row dependence: a reduction over the batch axis feeds rows' outputs",
      "Compute the statistic per row, reducing only along the non-batch axes (e.g. "
      "x.abs().amax(dim=-1, keepdim=True), or tl.max over the row inside the kernel), so each row's "
      "output depends on its own row only.")
def cross_row(a: Analysis):
    for c in a.host.cross_rows:
        yield c.origin.line, (f"{c.origin.describe()} reduces over the batch axis, and its result reaches "
                              f"{c.sink} (line {c.sink_line}): every row's output depends on the other rows")
    for k in _launched(a):
        for atomic in k.atomics:
            if atomic.shared and atomic.op in ORDER_FREE_ATOMICS - {"atomic_load", "atomic_poll"}:
                yield atomic.line, (f"`tl.{atomic.op}` in kernel `{k.name}` updates one location shared by "
                                    f"every program, so the value each row reads back mixes all rows")


# -- BI007 -------------------------------------------------------------------------------------
@rule("BI007", "batch-derived value in a row's arithmetic",
      "Compute a row's values from its own data, the unbatched inputs and constants only; the batch "
      "size (or the padded length) may set addresses, masks, the grid and how many rows a program "
      "visits, never a scale, offset or bit pattern applied to the row's values.")
def batch_in_row_arithmetic(a: Analysis):
    for launch, k, param, origin in _batch_params(a):
        values = k.values_of(param)
        if values:
            yield launch.line, (f"`{param}` of kernel `{k.name}` is derived from the batch size via "
                                f"{origin.describe()} and enters the arithmetic of the {values[0].role}, "
                                f"so a row's result depends on the batch size")
    for r in a.host.row_arithmetic:
        yield r.line, (f"`{r.text}` combines a batched tensor's rows with a value derived from the batch "
                       f"size via {r.origin.describe()}, so a row's result depends on the batch size")
