"""`@triton.autotune` and `@triton.heuristics` decorators, read without running the file.

Autotune configs are evaluated by a small constant interpreter (literals, module constants,
comprehensions, and same-file functions that build a list with loops and `append`); when that
fails the configs are reported as unknown and every name they set counts as varying.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass

LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg"}
_MAX_STEPS = 20000


class Unknown(Exception):
    """The expression cannot be evaluated statically."""


@dataclass
class Autotune:
    line: int
    keys: list[str]
    configs: list[dict[str, object]] | None
    """Each config's kwargs plus its launch options; None when they could not be evaluated."""
    names: set[str]
    """Every name a config sets (kwargs and launch options written in the source)."""

    def varying(self) -> set[str]:
        """Names whose value differs between configs (all of them when configs are unknown)."""
        if self.configs is None:
            return set(self.names)
        out = set()
        for name in set().union(*self.configs) if self.configs else ():
            values = {repr(c.get(name, _DEFAULTS.get(name))) for c in self.configs}
            if len(values) > 1:
                out.add(name)
        return out


_DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}


@dataclass
class Heuristic:
    param: str
    reads: frozenset[str]
    """Kernel arguments the heuristic reads (`args["M"]`)."""
    line: int


class ConstEval:
    """Evaluates constant Python expressions of a module: enough to list autotune configs."""

    def __init__(self, module_defs: dict[str, ast.AST]):
        self.defs = module_defs
        self.steps = 0

    def tick(self) -> None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise Unknown("too long")

    def expr(self, node: ast.expr, env: dict[str, object]) -> object:
        self.tick()
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            target = self.defs.get(node.id)
            if isinstance(target, ast.expr):
                return self.expr(target, {})
            raise Unknown(node.id)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    out.extend(self.expr(e.value, env))
                else:
                    out.append(self.expr(e, env))
            return tuple(out) if isinstance(node, ast.Tuple) else out
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    out.update(self.expr(v, env))
                else:
                    out[self.expr(k, env)] = self.expr(v, env)
            return out
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left, env), self.expr(node.right, env)
            ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
                   ast.FloorDiv: lambda a, b: a // b, ast.Pow: lambda a, b: a ** b,
                   ast.Mod: lambda a, b: a % b, ast.LShift: lambda a, b: a << b}
            if type(node.op) not in ops:
                raise Unknown("operator")
            try:
                return ops[type(node.op)](left, right)
            except Exception as exc:
                raise Unknown("arithmetic") from exc
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = self.expr(node.left, env), self.expr(node.comparators[0], env)
            ops = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
                   ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
                   ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
            if type(node.ops[0]) not in ops:
                raise Unknown("comparison")
            return ops[type(node.ops[0])](left, right)
        if isinstance(node, ast.BoolOp):
            values = [self.expr(v, env) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp):
            value = self.expr(node.operand, env)
            if isinstance(node.op, ast.Not):
                return not value
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.IfExp):
            return self.expr(node.body if self.expr(node.test, env) else node.orelse, env)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return [self.expr(node.elt, scope) for scope in self.comprehension(node.generators, env)]
        if isinstance(node, ast.DictComp):
            return {self.expr(node.key, s): self.expr(node.value, s)
                    for s in self.comprehension(node.generators, env)}
        if isinstance(node, ast.Call):
            return self.call(node, env)
        raise Unknown(type(node).__name__)

    def comprehension(self, generators: list[ast.comprehension], env: dict[str, object]):
        if not generators:
            yield env
            return
        gen, rest = generators[0], generators[1:]
        for item in self.expr(gen.iter, env):
            scope = dict(env)
            self.assign(gen.target, item, scope)
            if all(self.expr(cond, scope) for cond in gen.ifs):
                yield from self.comprehension(rest, scope)

    def assign(self, target: ast.expr, value: object, env: dict[str, object]) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value)
            if len(values) != len(target.elts):
                raise Unknown("unpack")
            for t, v in zip(target.elts, values, strict=True):
                self.assign(t, v, env)
        else:
            raise Unknown("target")

    def call(self, node: ast.Call, env: dict[str, object]) -> object:
        args = [self.expr(a, env) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, env) for k in node.keywords if k.arg}
        leaf = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if leaf == "Config":
            config = dict(args[0]) if args else dict(kwargs.pop("kwargs", {}))
            for i, option in enumerate(("num_warps", "num_stages", "num_ctas", "maxnreg")):
                if len(args) > i + 1:
                    config[option] = args[i + 1]
            config.update({k: v for k, v in kwargs.items() if k in LAUNCH_OPTIONS})
            return config
        builtins = {"range": range, "list": list, "tuple": tuple, "dict": dict, "len": len, "min": min,
                    "max": max, "sorted": sorted, "zip": zip, "enumerate": enumerate, "int": int,
                    "product": itertools.product}
        if leaf in builtins and (isinstance(node.func, ast.Name) or leaf == "product"):
            try:
                result = builtins[leaf](*args, **kwargs)
            except Exception as exc:
                raise Unknown(leaf) from exc
            return list(result) if leaf in {"zip", "enumerate", "product", "range"} else result
        fn = self.defs.get(leaf) if isinstance(node.func, ast.Name) else None
        if isinstance(fn, ast.FunctionDef):
            scope = {a.arg: v for a, v in zip(fn.args.args, args, strict=False)}
            scope.update(kwargs)
            try:
                self.run(fn.body, scope)
            except _Return as ret:
                return ret.value
            return None
        raise Unknown(leaf)

    def run(self, body: list[ast.stmt], env: dict[str, object]) -> object:
        """Run a same-file helper's body; returns what it returns."""
        for stmt in body:
            self.tick()
            if isinstance(stmt, ast.Return):
                raise _Return(self.expr(stmt.value, env) if stmt.value else None)
            if isinstance(stmt, ast.Assign):
                value = self.expr(stmt.value, env)
                for t in stmt.targets:
                    self.assign(t, value, env)
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                env[stmt.target.id] = self.expr(ast.BinOp(stmt.target, stmt.op, stmt.value), env)
            elif isinstance(stmt, ast.For):
                for item in self.expr(stmt.iter, env):
                    self.assign(stmt.target, item, env)
                    self.run(stmt.body, env)
            elif isinstance(stmt, ast.If):
                self.run(stmt.body if self.expr(stmt.test, env) else stmt.orelse, env)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                    and isinstance(stmt.value.func, ast.Attribute) \
                    and stmt.value.func.attr in {"append", "extend"}:
                target = self.expr(stmt.value.func.value, env)
                value = self.expr(stmt.value.args[0], env)
                target.append(value) if stmt.value.func.attr == "append" else target.extend(value)
            elif isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr)
                                                and not isinstance(stmt.value, ast.Call)):
                continue
            else:
                raise Unknown(type(stmt).__name__)
        return None


class _Return(Exception):
    def __init__(self, value: object):
        self.value = value


def _evaluate(node: ast.expr, defs: dict[str, ast.AST]) -> object:
    try:
        return ConstEval(defs).expr(node, {})
    except _Return as ret:
        return ret.value


def _decorator_arg(dec: ast.Call, name: str, position: int) -> ast.expr | None:
    for kw in dec.keywords:
        if kw.arg == name:
            return kw.value
    return dec.args[position] if len(dec.args) > position else None


def read_autotune(dec: ast.Call, defs: dict[str, ast.AST]) -> Autotune:
    configs_node = _decorator_arg(dec, "configs", 0)
    key_node = _decorator_arg(dec, "key", 1)
    keys: list[str] = []
    try:
        keys = [str(k) for k in _evaluate(key_node, defs)] if key_node is not None else []
    except (Unknown, TypeError, RecursionError):
        keys = [n.value for n in ast.walk(key_node)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    configs = None
    if configs_node is not None:
        try:
            value = _evaluate(configs_node, defs)
            if isinstance(value, list) and all(isinstance(c, dict) for c in value):
                configs = value
        except (Unknown, TypeError, RecursionError):
            configs = None
    if configs is None:
        names = _config_names(configs_node, defs)
    else:
        names = set().union(*configs) if configs else set()
    return Autotune(dec.lineno, keys, configs, names)


def _config_names(node: ast.expr | None, defs: dict[str, ast.AST]) -> set[str]:
    """Names set by `triton.Config(...)` calls written anywhere the configs expression reaches."""
    names: set[str] = set()
    seen: set[str] = set()
    stack = [node] if node is not None else []
    while stack:
        cur = stack.pop()
        for sub in ast.walk(cur):
            leaf = getattr(sub.func, "attr", getattr(sub.func, "id", "")) if isinstance(sub, ast.Call) else ""
            if leaf == "Config":
                if sub.args and isinstance(sub.args[0], ast.Dict):
                    names |= {k.value for k in sub.args[0].keys if isinstance(k, ast.Constant)}
                names |= {k.arg for k in sub.keywords if k.arg in LAUNCH_OPTIONS}
            if isinstance(sub, ast.Name) and sub.id in defs and sub.id not in seen:
                seen.add(sub.id)
                stack.append(defs[sub.id])
    return names


def read_heuristics(dec: ast.Call, defs: dict[str, ast.AST]) -> list[Heuristic]:
    values = _decorator_arg(dec, "values", 0)
    if isinstance(values, ast.Name) and isinstance(defs.get(values.id), ast.Dict):
        values = defs[values.id]
    if not isinstance(values, ast.Dict):
        return []
    out = []
    for key, fn in zip(values.keys, values.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        body: ast.AST = fn
        if isinstance(fn, ast.Name) and isinstance(defs.get(fn.id), ast.FunctionDef):
            body = defs[fn.id]
        bodies = [body] + [defs[n.id] for n in ast.walk(body)
                           if isinstance(n, ast.Name) and isinstance(defs.get(n.id), ast.FunctionDef)]
        reads = frozenset(n.slice.value for b in bodies for n in ast.walk(b)
                          if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
                          and isinstance(n.slice.value, str))
        out.append(Heuristic(key.value, reads, getattr(fn, "lineno", dec.lineno)))
    return out
