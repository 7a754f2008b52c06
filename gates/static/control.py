"""Control flow of the host analysis: statements, branches, loops and assignment.

A branch on a batch-derived value is recorded with the work each path does, and values that may
differ between its paths become batch-derived themselves (implicit flow). What follows an early
`return` is analysed as the other path of that branch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from gates.static.facts import Dispatch, short
from gates.static.values import CLEAN, Origin, Val, flat_batch, join, join_all, replace

ANY_KEY = "<any key>"
"""Where a dict keeps values stored under keys that are not constants."""


@dataclass
class Frame:
    """What one function call returns."""

    returns: list[Val] = field(default_factory=list)


def _terminates(body: list[ast.stmt]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    return isinstance(last, ast.If) and _terminates(last.body) and _terminates(last.orelse)


def _raises(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Raise)


def _empty_test(node: ast.expr) -> bool:
    """`T == 0`, `not x.numel()`, `T > 0`: a branch for the empty batch, which has no rows."""
    if isinstance(node, ast.BoolOp):
        return all(_empty_test(v) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _size(node.operand)
    if _size(node):
        return True
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        sides = [node.left, node.comparators[0]]
        consts = [s.value for s in sides if isinstance(s, ast.Constant)]
        if consts == [0]:
            return True
        if consts == [1] and isinstance(node.ops[0], (ast.Lt, ast.GtE)):
            return True
    return False


def _size(node: ast.expr) -> bool:
    """`T`, `len(x)`, `x.numel()`: a count whose truth means "not empty"."""
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        return (isinstance(func, ast.Name) and func.id == "len") or \
            (isinstance(func, ast.Attribute) and func.attr in {"numel", "nelement"})
    return False


class ControlFlow:
    """Mixin of the host reader: the statement part of its abstract interpretation."""

    def ifexp(self, node: ast.IfExp, env: dict[str, Val]) -> Val:
        test = self.expr(node.test, env)
        if test.known and flat_batch(test) is None:
            return self.expr(node.body if test.const else node.orelse, env)
        origin = None if _empty_test(node.test) else flat_batch(test)
        start = len(self.effects)
        a = self.expr(node.body, env)
        mid = len(self.effects)
        b = self.expr(node.orelse, env)
        if origin is not None:
            origin = Origin(node.lineno, short(node.test))
            self.facts.dispatches.append(Dispatch(node.lineno, short(node.test), origin,
                                                  [self.effects[start:mid], self.effects[mid:]]))
            # Equal abstract values are the same value only when known, or written alike: two
            # unknown sizes (`BLOCK // 8 if T < 16 else BLOCK`) are different sizes.
            same = a == b and (a.known or ast.dump(node.body) == ast.dump(node.orelse))
            return a if same else join(a, b).derived(origin)
        return join(a, b)

    # -- statements --------------------------------------------------------------------------
    def block(self, body: list[ast.stmt], env: dict[str, Val], frame: Frame) -> None:
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.If) and _terminates(stmt.body) and not _raises(stmt.body) \
                    and not _terminates(stmt.orelse):
                # What follows runs only on the other path: analyse it as that path's branch.
                self.if_stmt(stmt, env, frame, rest=body[i + 1:])
                return
            self.stmt(stmt, env, frame)
            if isinstance(stmt, (ast.Return, ast.Raise)):
                return

    def stmt(self, node: ast.stmt, env: dict[str, Val], frame: Frame) -> None:
        if isinstance(node, ast.Assign):
            value = self.expr(node.value, env)
            for target in node.targets:
                self.bind(target, value, env)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.bind(node.target, self.expr(node.value, env), env)
        elif isinstance(node, ast.AugAssign):
            current = self.expr(node.target, env)
            value = self.expr(ast.BinOp(node.target, node.op, node.value), env)
            if current.tensor:
                value = replace(current, mixed=current.mixed or value.mixed)
            self.bind(node.target, value, env)
        elif isinstance(node, ast.Expr):
            self.expr(node.value, env)
        elif isinstance(node, ast.Return):
            frame.returns.append(self.expr(node.value, env) if node.value else CLEAN)
        elif isinstance(node, ast.If):
            self.if_stmt(node, env, frame)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            it = self.expr(node.iter, env)
            self.loop(node, env, frame, flat_batch(it), it)
        elif isinstance(node, ast.While):
            test = self.expr(node.test, env)
            origin = flat_batch(test)
            if origin is not None:
                origin = Origin(node.lineno, short(node.test))
            self.loop(node, env, frame, origin, None)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                value = self.expr(item.context_expr, env)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, value, env)
            self.block(node.body, env, frame)
        elif isinstance(node, ast.Try):
            self.block(node.body, env, frame)
            for handler in node.handlers:
                self.block(handler.body, env, frame)
            self.block(node.orelse, env, frame)
            self.block(node.finalbody, env, frame)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            self.declare(node, env)

    def if_stmt(self, node: ast.If, env: dict[str, Val], frame: Frame, rest: list[ast.stmt] = ()) -> None:
        test = self.expr(node.test, env)
        if test.known and flat_batch(test) is None:  # e.g. `if x.is_cuda:`: only one path runs
            self.block((node.body if test.const else list(node.orelse)) + list(rest), env, frame)
            return
        origin = None if _empty_test(node.test) else flat_batch(test)
        if origin is not None:
            origin = Origin(node.lineno, f"if {short(node.test)}")
        branches = [node.body, list(node.orelse) + list(rest)]
        envs, paths = [], []
        returned = len(frame.returns)
        for body in branches:
            local = dict(env)
            start = len(self.effects)
            self.block(body, local, frame)
            paths.append(self.effects[start:])
            envs.append((local, body))
        if origin is not None and not any(_raises(b) for b in branches):
            self.facts.dispatches.append(Dispatch(node.lineno, short(node.test), origin, paths))
        new = frame.returns[returned:]
        if origin is not None and any(v != new[0] for v in new[1:]):
            # The function returns different values depending on the batch.
            frame.returns[returned:] = [v.derived(origin) for v in new]
        live = [local for local, body in envs if not _terminates(body)]
        if live:
            merged = self.merge(live, origin)
            env.clear()
            env.update(merged)

    def merge(self, envs: list[dict[str, Val]], origin: Origin | None) -> dict[str, Val]:
        """Values after paths meet; those that may differ between paths of a batch-derived branch
        become batch-derived themselves."""
        out: dict[str, Val] = {}
        for name in set().union(*envs):
            values = [e[name] for e in envs if name in e]
            first = values[0]
            same = len(values) == len(envs) and all(v == first for v in values[1:])
            out[name] = first if same else join_all(values).derived(origin)
        return out

    def loop(self, node: ast.For | ast.While | ast.AsyncFor, env: dict[str, Val], frame: Frame,
             origin: Origin | None, iterable: Val | None) -> None:
        for _ in range(2):  # twice, so values carried round the loop reach their uses
            before = dict(env)
            if iterable is not None:
                self.bind(node.target, self.element(iterable), env)  # type: ignore[union-attr]
            self.block(node.body, env, frame)
            merged = self.merge([before, env], origin)
            env.clear()
            env.update(merged)
        self.block(node.orelse, env, frame)

    def bind(self, target: ast.expr, value: Val, env: dict[str, Val]) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, t in enumerate(target.elts):
                if isinstance(t, ast.Starred):
                    self.bind(t.value, Val(batch=flat_batch(value)), env)
                elif value.elts is not None and i < len(value.elts):
                    self.bind(t, value.elts[i], env)
                elif value.obj is not None and value.obj.cls == "<shape>":
                    self.bind(t, self.dim(value.obj.attrs["of"], i, target.lineno), env)
                elif value.tensor:
                    self.bind(t, value, env)
                else:
                    self.bind(t, Val(batch=flat_batch(value), mixed=value.mixed), env)
        elif isinstance(target, ast.Attribute):
            base = self.expr(target.value, env)
            if base.obj is not None:
                base.obj.attrs[target.attr] = value
        elif isinstance(target, ast.Subscript):
            base = self.expr(target.value, env)
            if base.obj is not None and base.obj.cls == "<dict>":
                key = self.expr(target.slice, env)
                if key.known:
                    base.obj.attrs[key.const] = value
                else:  # a cache filled under computed keys: what any lookup may return
                    old = base.obj.attrs.get(ANY_KEY)
                    base.obj.attrs[ANY_KEY] = value if old is None else join(old, value)
            elif isinstance(target.value, ast.Name) and base.tensor and value.mixed:
                env[target.value.id] = replace(base, mixed=value.mixed)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, value, env)
