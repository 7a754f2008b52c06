"""Abstract values of the host-side analysis: what a Python value may carry about the batch.

A value is never computed, only described: whether it is derived from the batch size, whether it
is a tensor holding the batch's rows, whether its data mixes rows, and what is known of its shape,
its elements, its constant value and the same-file functions or classes it may name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

NOCONST = object()
"""Marker for "no known constant value"."""


@dataclass(frozen=True)
class Origin:
    """Why a value is batch-derived (or row-mixing): where it became so and how it reads there."""

    line: int
    text: str
    row_count: bool = False
    """The value counts the batch's rows (`x.shape[0]`, `x.numel()`), rather than being chosen
    from it or being the padded length: a buffer allocated with it holds one entry per row."""

    def describe(self) -> str:
        return f"`{self.text}` (line {self.line})"


@dataclass(eq=False)
class Obj:
    """An instance of a same-file class, or a dict-like namespace (a grid lambda's META)."""

    cls: str
    attrs: dict[str, Val] = field(default_factory=dict)


class Val(NamedTuple):
    batch: Origin | None = None
    """Set when the value depends on the batch size (or the batch-wide padded length)."""
    rows: str | None = None
    """For a tensor: the batched input whose rows it holds along `row_axis`."""
    row_axis: int | None = 0
    mixed: Origin | None = None
    """Set when the data was reduced across rows of a batched tensor."""
    tensor: bool = False
    integer: bool = False
    """A tensor of integers: its reductions are exact."""
    dims: tuple[Val, ...] | None = None
    """A tensor's extents, axis by axis, when known."""
    elts: tuple[Val, ...] | None = None
    """A tuple's or list's elements (shapes included), when known."""
    const: object = NOCONST
    funcs: frozenset[str] = frozenset()
    """Same-file functions, kernels or classes this value may name."""
    obj: Obj | None = None

    @property
    def known(self) -> bool:
        return self.const is not NOCONST

    def derived(self, origin: Origin | None) -> Val:
        """The same value, also batch-derived from `origin` when given."""
        if origin is None or self.batch is not None:
            return self
        return self._replace(batch=origin)


CLEAN = Val()


def replace(v: Val, **changes) -> Val:
    """`v` with some fields changed."""
    return v._replace(**changes)


def _join_seq(a: tuple[Val, ...] | None, b: tuple[Val, ...] | None) -> tuple[Val, ...] | None:
    if a is None or b is None:
        return a if b is None else b
    if len(a) != len(b):
        return None
    return tuple(join(x, y) for x, y in zip(a, b, strict=True))


def join(a: Val, b: Val) -> Val:
    """What is known of a value that may be either `a` or `b`."""
    if a is b:
        return a
    const = a.const if (a.known and b.known and type(a.const) is type(b.const) and a.const == b.const) \
        else NOCONST
    return Val(batch=a.batch or b.batch, rows=a.rows or b.rows,
               row_axis=a.row_axis if a.rows else b.row_axis, mixed=a.mixed or b.mixed,
               tensor=a.tensor or b.tensor, integer=a.integer and b.integer,
               dims=_join_seq(a.dims, b.dims), elts=_join_seq(a.elts, b.elts), const=const,
               funcs=a.funcs | b.funcs, obj=_join_obj(a.obj, b.obj))


def _join_obj(a: Obj | None, b: Obj | None) -> Obj | None:
    """Either object: attributes joined name by name (objects built on different paths)."""
    if a is None or b is None or a is b:
        return a or b
    attrs = dict(a.attrs)
    for name, value in b.attrs.items():
        attrs[name] = join(attrs[name], value) if name in attrs else value
    return Obj(a.cls if a.cls == b.cls else f"{a.cls}|{b.cls}", attrs)


def join_all(values) -> Val:
    out: Val | None = None
    for v in values:
        out = v if out is None else join(out, v)
    return out or CLEAN


def flat_batch(v: Val) -> Origin | None:
    """The batch origin of a scalar-like value, looking into tuple elements."""
    if v.batch is not None:
        return v.batch
    for e in v.elts or ():
        origin = flat_batch(e)
        if origin is not None:
            return origin
    return None


def combine(values, *, const: object = NOCONST) -> Val:
    """The result of arithmetic on `values`: batch- and row-derivation flow through."""
    values = list(values)
    batch = next((flat_batch(v) for v in values if flat_batch(v)), None)
    mixed = next((v.mixed for v in values if v.mixed), None)
    tensors = [v for v in values if v.tensor]
    rows = next((v for v in tensors if v.rows), None)
    dims = None
    if tensors:
        widest = max(tensors, key=lambda t: len(t.dims or ()))
        dims = widest.dims
    return Val(batch=batch, mixed=mixed, tensor=bool(tensors), rows=rows.rows if rows else None,
               row_axis=rows.row_axis if rows else 0, dims=dims,
               integer=bool(tensors) and all(t.integer for t in tensors), const=const)
