"""The values of the kernel reader's abstract interpretation (`gates.static.kernel_reader`).

A `KV` is what the reader knows of one value of a `@triton.jit` body: the kernel parameters it
depends on, the parameters that set the extent of each of its block axes, whether it is a
pointer, a constant, a tuple, data loaded from memory or a mask. `merge` joins values by
selection, `mix` by arithmetic, `broadcast` combines block shapes and `fold` folds integer
constants.
"""

from __future__ import annotations

import ast
from typing import NamedTuple


class KV(NamedTuple):
    """A kernel-side value: the parameters it depends on and the extents of its block axes."""

    deps: frozenset[str] = frozenset()
    shape: tuple[frozenset[str], ...] | None = None
    ptr: bool = False
    const: object = None
    elts: tuple[KV, ...] | None = None
    data: bool = False
    """Computed from values loaded from memory (a row's data), not only from indices."""
    mixed: frozenset[str] = frozenset()
    """Parameters that entered arithmetic on data on the way to this value."""
    mask: bool = False
    """A comparison result: multiplying data by it selects, it does not compute."""
    position: bool = False
    """Data-dependent only as a position: indices chosen by comparing data (`tl.where(x > best, i,
    best_i)`), not bits of loaded values; offsetting it by a chunk start is no arithmetic on data."""
    integer: bool = False
    """Known to hold integers (indices, int casts, bit operations): sums of it are exact, so an
    atomic that merges it is no order hazard. Scalar parameters count as integers here."""


EMPTY = KV()


def broadcast(shapes) -> tuple[frozenset[str], ...] | None:
    shapes = [s for s in shapes if s is not None]
    if len(shapes) <= 1:
        return shapes[0] if shapes else None
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dep: frozenset[str] = frozenset()
        for s in shapes:
            j = i - (rank - len(s))
            if j >= 0:
                dep |= s[j]
        out.append(dep)
    return tuple(out)


def merge(values, shape=None, ptr=None) -> KV:
    """A value built from `values` by selection or joining paths: dependencies add up."""
    values = list(values)
    if len(values) == 1 and shape is None and ptr is None:
        return values[0]._replace(const=None, elts=None)
    deps = frozenset().union(*(v.deps for v in values)) if values else frozenset()
    return KV(deps=deps, shape=shape if shape is not None else broadcast(v.shape for v in values),
              ptr=any(v.ptr for v in values) if ptr is None else ptr, data=any(v.data for v in values),
              mixed=frozenset().union(*(v.mixed for v in values)) if values else frozenset(),
              mask=bool(values) and all(v.mask for v in values),
              integer=bool(values) and all(v.integer for v in values),
              position=any(v.data for v in values) and all(v.position for v in values if v.data))


def mix(values) -> KV:
    """A value computed arithmetically from `values`: when some are data, the parameters the
    others depend on enter the data (masks and program ids excepted)."""
    values = list(values)
    out = merge(values)
    if out.data and not out.position:
        extra = frozenset(d for v in values if not v.data and not v.mask for d in v.deps
                          if not d.startswith(("pid:", "nprog:")))
        if extra:
            out = out._replace(mixed=out.mixed | extra)
    return out._replace(mask=False)


def fold(op: ast.operator, a: object, b: object) -> object:
    if not (isinstance(a, int) and isinstance(b, int)):
        return None
    try:
        return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(op))
    except Exception:
        return None


BIT_OPS = (ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor)
INT_PRESERVING = {"maximum", "minimum", "abs", "max", "min", "cdiv", "umulhi", "reduce", "sum",
                   "cumsum", "argmax", "argmin", "broadcast_to", "reshape", "view", "trans", "permute"}




def untouched(value: KV | None, name: str) -> bool:
    """The parameter `name` as the kernel received it (not reassigned in the body)."""
    return value is not None and value.deps == {name} and value.shape is None and not value.data \
        and not value.ptr


def int_dtype(node: ast.Call) -> bool | None:
    """Whether a call's dtype argument (`tl.int32`, `dtype=tl.float32`) is an integer type;
    None when it names none."""
    for arg in [*node.args, *(k.value for k in node.keywords if k.arg in {"dtype", "dst_ty"})]:
        name = arg.attr if isinstance(arg, ast.Attribute) else ""
        if name.startswith(("int", "uint")):
            return True
        if name.startswith(("float", "bfloat")) or name in {"fp8e4nv", "fp8e5"}:
            return False
    return None
