"""Calls inside a kernel body, for the kernel reader (`gates.static.kernel_reader`): `tl.*`
builtins (program ids, aranges, loads and stores, dots, reductions, atomics, casts, `where`) and
same-file `@triton.jit` helpers, which are inlined."""

from __future__ import annotations

import ast

from gates.static.block_values import BIT_OPS, EMPTY, INT_PRESERVING, KV, broadcast, int_dtype, merge, mix
from gates.static.kernels import (
    EXACT_REDUCTIONS,
    SELECTIONS,
    SUM_REDUCTIONS,
    Atomic,
    ReductionUse,
    call_leaf,
    dotted,
)

MAX_INLINE_DEPTH = 6


class KernelCalls:
    """Mixin of the kernel reader: what each call in a kernel does to block values."""

    def call(self, node: ast.Call, env: dict[str, KV]) -> KV:
        name = dotted(node.func)
        leaf = name.split(".")[-1] if name else ""
        if isinstance(node.func, ast.Attribute):
            leaf = node.func.attr
        positional: list[ast.expr] = list(node.args)
        if isinstance(node.func, ast.Attribute) and not _module_path(node.func.value, env):
            positional.insert(0, node.func.value)  # a method: its receiver is the first operand
        args = [self.expr(a, env) for a in positional]
        kwargs = {k.arg: self.expr(k.value, env) for k in node.keywords if k.arg}
        line = node.lineno

        if isinstance(node.func, ast.Name) and node.func.id in self.jit:
            return self.inline(self.jit[node.func.id], args, kwargs)
        if leaf == "program_id":
            return KV(deps=frozenset({f"pid:{_axis(node)}"}), integer=True)
        if leaf == "num_programs":
            return KV(deps=frozenset({f"nprog:{_axis(node)}"}), integer=True)
        if leaf == "arange":
            return KV(deps=merge(args).deps, shape=(merge(args).deps,), integer=True)
        if leaf in {"zeros", "full", "empty"}:
            return KV(shape=self.shape_arg(node.args[0] if node.args else None, env),
                      integer=int_dtype(node) is True)
        if leaf in {"zeros_like", "full_like", "empty_like"} and args:
            return KV(shape=args[0].shape, integer=args[0].integer if int_dtype(node) is None
                      else int_dtype(node))
        if leaf == "load" and args:
            return KV(shape=broadcast([args[0].shape, kwargs.get("mask", EMPTY).shape]), data=True)
        if leaf == "make_block_ptr":
            block = kwargs.get("block_shape") or (args[4] if len(args) > 4 else EMPTY)
            shape = tuple(e.deps for e in block.elts) if block.elts else None
            return KV(deps=merge(args[:1]).deps, shape=shape, ptr=True)
        if leaf.startswith("atomic_"):
            # The value merged in: atomic_cas(ptr, cmp, val) writes its third argument.
            value = (args[2] if len(args) > 2 else kwargs.get("val", EMPTY)) if leaf == "atomic_cas" \
                else (args[1] if len(args) > 1 else kwargs.get("val", EMPTY))
            self.atomic(node, leaf, args[0] if args else EMPTY, value)
            self.stored(value, line)
            return KV(shape=args[0].shape if args else None, data=True, integer=value.integer)
        if leaf in {"dot", "dot_scaled"} and len(args) >= 2:
            self.rounding += 1
            a, b = args[0], args[1] if leaf == "dot" else args[2]
            k = (a.shape[-1] if a.shape else frozenset()) | (b.shape[0] if b.shape else frozenset())
            self.use(k, "extent of the axis tl.dot reduces (K)", line)
            shape = (a.shape[0], b.shape[-1]) if a.shape and b.shape else None
            return mix([a, b])._replace(shape=shape)
        if leaf in SUM_REDUCTIONS | EXACT_REDUCTIONS and args and args[0].shape is not None:
            return self.reduction(node, leaf, positional, args)
        if leaf in {"reshape", "view", "broadcast_to"} and len(positional) >= 2:
            shape = self.shape_arg(positional[1], env) if len(positional) == 2 \
                else tuple(a.deps for a in args[1:])
            return args[0]._replace(shape=shape)
        if leaf in {"trans", "permute"} and args and args[0].shape:
            return args[0]._replace(shape=tuple(reversed(args[0].shape)))
        if leaf in {"to", "cast"} and args:
            kind = int_dtype(node)
            return args[0] if kind is None else args[0]._replace(integer=kind)
        if leaf in {"multiple_of", "max_contiguous", "max_constancy", "advance"} and args:
            return args[0]
        if leaf == "store":
            self.stored(args[1] if len(args) > 1 else kwargs.get("value", EMPTY), line)
            return EMPTY
        if leaf in {"static_assert", "device_assert", "debug_barrier", "device_print"}:
            return EMPTY
        if leaf == "where" and len(args) == 3:  # selection, not arithmetic
            chosen = [a for a in args[1:] if a.data and not a.position]
            return merge(args)._replace(mask=args[1].mask and args[2].mask,
                                        position=args[0].data and not chosen,
                                        integer=args[1].integer and args[2].integer)
        out = mix([*args, *kwargs.values()])
        if leaf not in INT_PRESERVING:
            out = out._replace(integer=False)
        if out.data and not out.integer and leaf not in SELECTIONS:
            self.rounding += 1  # exp, log, sqrt, sigmoid, div_rn, fma ...
        return out

    def reduction(self, node: ast.Call, leaf: str, positional: list[ast.expr], args: list[KV]) -> KV:
        shape = args[0].shape or ()
        axis_node = positional[1] if len(positional) > 1 else None
        for kw in node.keywords:
            if kw.arg == "axis":
                axis_node = kw.value
        axis = axis_node.value if isinstance(axis_node, ast.Constant) else None
        if axis is None or not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            reduced, rest = frozenset().union(*shape) if shape else frozenset(), ()
        else:
            axis %= len(shape)
            reduced, rest = shape[axis], shape[:axis] + shape[axis + 1:]
        if leaf == "reduce" and self.exact_combine(node):
            leaf = "max"  # tl.reduce(x, axis, combine) with a max/min combine function
        if leaf in SUM_REDUCTIONS and args[0].data and not args[0].integer:
            self.rounding += 1
        if leaf in SUM_REDUCTIONS:
            self.use(reduced, f"extent of the axis tl.{leaf} reduces", node.lineno)
            if self.info.block_sum_line is None:
                self.info.block_sum_line = node.lineno
            if leaf in {"cumsum", "cumprod", "associative_scan", "softmax"}:
                rest = shape
        keep = any(kw.arg == "keep_dims" and isinstance(kw.value, ast.Constant) and kw.value.value
                   for kw in node.keywords)
        index = leaf in {"argmax", "argmin"}  # a position, not a value computed from the data
        return args[0]._replace(shape=shape if keep else rest, const=None, elts=None,
                                data=args[0].data and not index,
                                mixed=frozenset() if index else args[0].mixed)

    def exact_combine(self, node: ast.Call) -> bool:
        """Whether `tl.reduce`'s combine function (a same-file jit function) only selects: max,
        min, where, comparisons and bit operations, which are exact in any order."""
        fn = node.args[2] if len(node.args) > 2 else next(
            (k.value for k in node.keywords if k.arg == "combine_fn"), None)
        body = self.jit.get(fn.id) if isinstance(fn, ast.Name) else None
        if body is None:
            return False
        for n in ast.walk(body):
            if isinstance(n, ast.Call) and call_leaf(n) not in SELECTIONS | {"to"}:
                return False
            if isinstance(n, ast.BinOp) and not isinstance(n.op, BIT_OPS):
                return False
        return True

    def shape_arg(self, node: ast.expr | None, env: dict[str, KV]) -> tuple[frozenset[str], ...] | None:
        if isinstance(node, (ast.List, ast.Tuple)):
            return tuple(self.expr(e, env).deps for e in node.elts)
        if node is not None:
            value = self.expr(node, env)
            if value.elts is not None:
                return tuple(e.deps for e in value.elts)
            return (value.deps,)
        return None

    def stored(self, value: KV, line: int) -> None:
        """Parameters mixed into a value written to memory: they change a row's result."""
        if value.mixed:
            self.info.values.append(ReductionUse(value.mixed, f"value stored at line {line}", line))

    def atomic(self, node: ast.Call, leaf: str, pointer: KV, value: KV) -> None:
        val = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "val"), None)
        counter = isinstance(val, ast.Constant) and isinstance(val.value, int)
        shared = not any(d.startswith("pid:") for d in pointer.deps)
        self.info.atomics.append(Atomic(leaf, node.lineno, list(self.guards), counter, shared,
                                        integer=value.integer))

    def inline(self, fn: ast.FunctionDef, args: list[KV], kwargs: dict[str, KV]) -> KV:
        if self.depth >= MAX_INLINE_DEPTH:
            return merge([*args, *kwargs.values()])
        env: dict[str, KV] = {}
        params = [a.arg for a in fn.args.args]
        for i, p in enumerate(params):
            env[p] = args[i] if i < len(args) else kwargs.get(p, EMPTY)
        self.depth += 1
        try:
            ret = self.block(fn.body, env)
        finally:
            self.depth -= 1
        return ret or EMPTY




def _module_path(node: ast.expr, env: dict[str, KV]) -> bool:
    """`tl`, `tl.math`, `triton.language`: a dotted name whose root is not a local value."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id not in env


def _axis(node: ast.Call) -> int:
    arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "axis"), None)
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, int) else 0


