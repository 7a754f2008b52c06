"""Expressions in the host analysis: names, attributes, subscripts, arithmetic, comparisons,
containers, comprehensions and lambdas, with constants folded where every operand is known.

Arithmetic between a batched tensor and a batch-derived scalar is recorded as row arithmetic, and a
`@` on batched rows as a GEMM; attributes of objects chosen by the batch are batch-derived.
"""

from __future__ import annotations

import ast
import operator

from gates.static.facts import RowArithmetic, TorchOp, short
from gates.static.kernels import dotted
from gates.static.values import CLEAN, NOCONST, Obj, Origin, Val, combine, flat_batch, join_all, replace

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_COMPARES = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
             ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
             ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


def _huge(exponent: object) -> bool:
    """An exponent or shift too large to fold quickly."""
    return not isinstance(exponent, (int, float)) or abs(exponent) > 4096


class ExpressionSemantics:
    """Mixin of the host reader: the expression part of its abstract interpretation."""

    # -- expressions -------------------------------------------------------------------------
    def attribute(self, base: Val, attr: str, node: ast.Attribute, env: dict[str, Val]) -> Val:
        if base.obj is not None:
            if attr in base.obj.attrs:  # an object chosen by the batch has batch-chosen fields
                value = base.obj.attrs[attr]
                return value if value.known else value.derived(flat_batch(base))
            if f"{base.obj.cls}.{attr}" in self.callables:
                fn = self.callables[f"{base.obj.cls}.{attr}"][0]
                value = Val(funcs=frozenset({f"{base.obj.cls}.{attr}"}), obj=base.obj)
                if isinstance(fn, ast.FunctionDef) and any(dotted(d) == "property"
                                                           for d in fn.decorator_list):
                    return self.invoke(f"{base.obj.cls}.{attr}", [], {}, base.obj, node.lineno)
                return value
            expr = self.class_attrs.get(base.obj.cls, {}).get(attr)
            if expr is not None:
                return self.expr(expr, dict(self.globals))
            return CLEAN
        if base.tensor:
            if attr == "shape":
                return self.shape_of(base, node.lineno)
            if attr in {"T", "mT"}:
                return self.transposed(base)
            if attr == "ndim":
                return Val(const=len(base.dims)) if base.dims is not None else CLEAN
            # The gate judges the candidate as it runs on the GPU: device checks are constant.
            if attr == "is_cuda":
                return Val(const=True)
            if attr == "device":
                return Val(obj=Obj("<device>", {"type": Val(const="cuda")}))
            if attr in {"dtype", "layout", "is_cpu"}:
                return Val(const=False) if attr == "is_cpu" else CLEAN
            return base
        for key in sorted(base.funcs):  # a class attribute read through the class itself
            if key in self.class_attrs and attr in self.class_attrs[key]:
                return self.expr(self.class_attrs[key][attr], dict(self.globals))
            if f"{key}.{attr}" in self.callables:
                return Val(funcs=frozenset({f"{key}.{attr}"}))
        return Val(batch=flat_batch(base), mixed=base.mixed)

    def expr(self, node: ast.expr | None, env: dict[str, Val]) -> Val:
        if node is None:
            return CLEAN
        if isinstance(node, ast.Constant):
            return Val(const=node.value)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.globals:
                return self.globals[node.id]
            return self.library_function(self.aliases.get(node.id, ""))
        if isinstance(node, ast.Attribute):
            qualified = self.qualify(node, env)
            if qualified:
                return self.library_function(qualified)
            return self.attribute(self.expr(node.value, env), node.attr, node, env)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, env)
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left, env), self.expr(node.right, env)
            if isinstance(node.op, ast.MatMult):
                rows = next((v for v in (left, right) if v.rows), None)
                self.torch_effect("__matmul__")
                if rows is not None:
                    self.facts.torch_ops.append(TorchOp("@", node.lineno, "gemm", rows.rows or ""))
                return combine([left, right])
            if _rows_cancel(node, left, right):
                return CLEAN  # `x.numel() // M // N`: the elements per row, whatever the batch
            for t, scalar in ((left, right), (right, left)):
                origin = flat_batch(scalar)
                if t.tensor and t.rows and not t.integer and not scalar.tensor and origin is not None:
                    self.facts.row_arithmetic.append(RowArithmetic(node.lineno, short(node), origin))
            const = NOCONST
            if left.known and right.known and type(node.op) in _BINOPS \
                    and not (isinstance(node.op, (ast.Pow, ast.LShift)) and _huge(right.const)):
                try:
                    const = _BINOPS[type(node.op)](left.const, right.const)
                except Exception:
                    const = NOCONST
            if left.elts is not None and right.elts is not None and isinstance(node.op, ast.Add):
                return Val(elts=left.elts + right.elts)
            return combine([left, right], const=const)
        if isinstance(node, ast.UnaryOp):
            value = self.expr(node.operand, env)
            const = NOCONST
            if value.known:
                try:
                    const = {ast.USub: lambda v: -v, ast.Not: lambda v: not v, ast.UAdd: lambda v: v,
                             ast.Invert: lambda v: ~v}[type(node.op)](value.const)
                except Exception:
                    const = NOCONST
            return replace(value, const=const) if value.tensor else combine([value], const=const)
        if isinstance(node, ast.BoolOp):
            values = [self.expr(v, env) for v in node.values]
            const = NOCONST
            if all(v.known for v in values):
                const = all(v.const for v in values) if isinstance(node.op, ast.And) \
                    else any(v.const for v in values)
            elif isinstance(node.op, ast.And) and any(v.known and not v.const for v in values):
                const = False
            elif isinstance(node.op, ast.Or) and any(v.known and v.const for v in values):
                const = True
            return combine(values, const=const)
        if isinstance(node, ast.Compare):
            parts = [self.expr(p, env) for p in [node.left, *node.comparators]]
            const = NOCONST
            if all(p.known for p in parts) and all(type(op) in _COMPARES for op in node.ops):
                try:
                    const = all(_COMPARES[type(op)](a.const, b.const)
                                for op, a, b in zip(node.ops, parts, parts[1:], strict=False))
                except Exception:
                    const = NOCONST
            return combine(parts, const=const)
        if isinstance(node, ast.IfExp):
            return self.ifexp(node, env)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts: list[Val] = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    value = self.expr(e.value, env)
                    elts.extend(value.elts if value.elts is not None else [value])
                else:
                    elts.append(self.expr(e, env))
            return Val(elts=tuple(elts))
        if isinstance(node, ast.Dict):
            attrs, values = {}, []
            for k, v in zip(node.keys, node.values, strict=True):
                value = self.expr(v, env)
                values.append(value)
                if isinstance(k, ast.Constant):
                    attrs[k.value] = value
            return Val(obj=Obj("<dict>", attrs), elts=tuple(values))
        if isinstance(node, ast.Lambda):
            key = f"<lambda>@{node.lineno}:{node.col_offset}"
            self.callables[key] = (node, env)
            return Val(funcs=frozenset({key}))
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            scope = dict(env)
            for gen in node.generators:
                self.bind(gen.target, self.element(self.expr(gen.iter, scope)), scope)
            value = self.expr(node.value if isinstance(node, ast.DictComp) else node.elt, scope)
            return value
        if isinstance(node, ast.Call):
            return self.call(node, env)
        if isinstance(node, ast.Starred):
            return self.expr(node.value, env)
        if isinstance(node, ast.NamedExpr):
            value = self.expr(node.value, env)
            self.bind(node.target, value, env)
            return value
        if isinstance(node, ast.Slice):
            return combine([self.expr(p, env) for p in (node.lower, node.upper, node.step) if p is not None])
        return CLEAN

    def element(self, iterable: Val) -> Val:
        if iterable.elts is not None:
            return join_all(iterable.elts).derived(flat_batch(iterable) if iterable.batch else None)
        return iterable if iterable.tensor else Val(batch=flat_batch(iterable), mixed=iterable.mixed)

    def subscript(self, node: ast.Subscript, env: dict[str, Val]) -> Val:
        base = self.expr(node.value, env)
        index = self.expr(node.slice, env)
        if base.obj is not None and base.obj.cls == "<shape>":
            t = base.obj.attrs["of"]
            if index.known and isinstance(index.const, int):
                return self.dim(t, index.const, node.lineno)
            return Val(batch=Origin(node.lineno, f"{t.rows}.shape", row_count=True) if t.rows else None)
        if base.obj is not None and base.obj.cls == "<dict>":
            if index.known and index.const in base.obj.attrs:
                return base.obj.attrs[index.const]
            values = list(base.obj.attrs.values())
            if values and all(v == values[0] for v in values[1:]):
                return values[0]  # every entry the same: the key does not choose
            return join_all(values).derived(flat_batch(index))
        if base.tensor:
            return self.tensor_index(base, node.slice, env)
        if base.elts is not None:
            n = len(base.elts)
            if index.known and isinstance(index.const, int) and -n <= index.const < n:
                return base.elts[index.const]
            if isinstance(node.slice, ast.Slice):
                lo, hi = self.expr(node.slice.lower, env), self.expr(node.slice.upper, env)
                if (node.slice.lower is None or lo.known) and (node.slice.upper is None or hi.known) \
                        and node.slice.step is None:
                    return Val(elts=base.elts[lo.const if node.slice.lower else None:
                                              hi.const if node.slice.upper else None])
            return join_all(base.elts).derived(flat_batch(index))
        return combine([base, index])


def _all_elements(node: ast.AST) -> bool:
    """`x.numel()`, or it divided by counts (`x.numel() // M`): every element of a tensor."""
    while isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Div)):
        node = node.left
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr in {"numel", "nelement"} and not node.args


def _rows_cancel(node: ast.BinOp, left: Val, right: Val) -> bool:
    """A tensor's element count divided by its row count (`x.numel() // x.shape[0]`, FlagGems'
    `K = x.numel() // M // N` with `M` the product of the leading extents): the rows cancel, so
    the quotient is the size of one row, the same in every batch."""
    if not isinstance(node.op, (ast.FloorDiv, ast.Div)) or not _all_elements(node.left):
        return False
    counted, divisor = flat_batch(left), flat_batch(right)
    return bool(counted and counted.row_count and divisor and divisor.row_count)
