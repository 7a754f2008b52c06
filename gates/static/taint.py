"""Batch taint through a candidate's host code, starting from the task's entry function.

The entry's parameters are described from the task contract: a batched tensor's axis 0 (and a
padded axis such as decode_attention's L) is batch-derived. The reader then follows values
through assignments, arithmetic, ternaries, `min`/`max`, `triton.cdiv`, same-file helper functions
and classes, into kernel launches, and records facts for the rules: each launch with what is
bound to each kernel parameter and grid axis, torch ops applied to batched tensors, values
reduced across rows that reach an output, and branches on batch-derived values with the work
each path does. Nothing is executed.
"""

from __future__ import annotations

import ast
import math

from gates.contract import Task
from gates.static import ops
from gates.static.configs import LAUNCH_OPTIONS
from gates.static.control import ControlFlow, Frame
from gates.static.facts import CrossRow, Dispatch, HostFacts, Launch, RowArithmetic, TorchOp, short
from gates.static.kernels import KernelInfo, dotted
from gates.static.tensors import TensorSemantics
from gates.static.values import CLEAN, NOCONST, Obj, Origin, Val, combine, flat_batch, join, join_all, replace

MAX_CALL_DEPTH = 12

__all__ = ["CrossRow", "Dispatch", "HostFacts", "HostReader", "Launch", "RowArithmetic", "TorchOp",
           "read_host"]


def _fold_call(fn, args: list[Val]) -> object:
    if args and all(a.known for a in args):
        try:
            return fn(*[a.const for a in args])
        except Exception:
            return NOCONST
    return NOCONST


_SCALAR_FUNCS = {
    "min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round, "bool": bool,
    "math.ceil": math.ceil, "math.floor": math.floor, "math.log2": math.log2, "math.sqrt": math.sqrt,
    "math.log": math.log, "math.prod": None, "pow": pow, "divmod": None, "sum": None,
    "triton.cdiv": lambda a, b: -(-a // b),
    "triton.next_power_of_2": lambda n: 1 << (int(n) - 1).bit_length() if n > 0 else 1,
    "triton.language.cdiv": lambda a, b: -(-a // b),
}

_KNOWN_ON_GPU = {"torch.cuda.is_available": True}


class HostReader(ControlFlow, TensorSemantics):
    """Abstract interpreter of a candidate's host code (see the module docstring)."""

    def __init__(self, tree: ast.Module, task: Task, kernels: dict[str, KernelInfo]):
        self.task = task
        self.kernels = kernels
        self.facts = HostFacts()
        self.aliases: dict[str, str] = {}
        self.globals: dict[str, Val] = {}
        self.callables: dict[str, tuple[ast.AST, dict[str, Val] | None]] = {}
        self.class_attrs: dict[str, dict[str, ast.expr]] = {}
        self.effects: list[Launch | str] = []
        self.stack: list[str] = []
        for stmt in tree.body:
            self.declare(stmt, self.globals, top=True)
        for stmt in tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self.stmt(stmt, self.globals, Frame())
        for name in kernels:  # kernels, including those made by `k2 = triton.autotune(...)(k)`
            self.globals[name] = Val(funcs=frozenset({name}))
        self.effects.clear()
        self.facts = HostFacts()

    # -- declarations ------------------------------------------------------------------------
    def declare(self, stmt: ast.stmt, env: dict[str, Val], top: bool = False) -> None:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(stmt, ast.ImportFrom) and stmt.module:
            for a in stmt.names:
                self.aliases[a.asname or a.name] = f"{stmt.module}.{a.name}"
        elif isinstance(stmt, ast.FunctionDef):
            key = stmt.name if top else f"{stmt.name}@{stmt.lineno}"
            self.callables[key] = (stmt, None if top else env)
            env[stmt.name] = Val(funcs=frozenset({key}))
        elif isinstance(stmt, ast.ClassDef):
            self.callables[stmt.name] = (stmt, None)
            attrs: dict[str, ast.expr] = {}
            for item in stmt.body:
                if isinstance(item, ast.FunctionDef):
                    self.callables[f"{stmt.name}.{item.name}"] = (item, None)
                elif isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                    attrs[item.targets[0].id] = item.value
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    attrs[item.target.id] = item.value  # type: ignore[assignment]
            self.class_attrs[stmt.name] = attrs
            env[stmt.name] = Val(funcs=frozenset({stmt.name}))

    def library_function(self, qualified: str) -> Val:
        """A reference to a torch function (callable later through a variable); else clean."""
        if qualified.startswith("torch.") and not qualified.startswith(("torch.cuda", "torch.library")):
            return Val(funcs=frozenset({"@" + qualified}))
        return CLEAN

    def qualify(self, node: ast.expr, env: dict[str, Val]) -> str:
        """`F.linear` -> `torch.nn.functional.linear`; "" for a local value."""
        name = dotted(node)
        if not name:
            return ""
        root, _, rest = name.partition(".")
        if root in env or (root in self.globals and root not in self.aliases):
            return ""
        if root in self.aliases:
            return self.aliases[root] + ("." + rest if rest else "")
        return name

    # -- entry -------------------------------------------------------------------------------
    def run_entry(self) -> HostFacts:
        entry = self.globals.get(self.task.entry)
        if entry is None:
            self.facts.entry_found = self.task.entry in self.aliases
            self.facts.entry_followed = False
            return self.facts
        key = next(iter(sorted(entry.funcs)), "")
        node = self.callables.get(key, (None, None))[0]
        if entry.obj is not None:
            key = f"{entry.obj.cls}.__call__"
            node = self.callables.get(key, (None, None))[0]
        if not isinstance(node, ast.FunctionDef):  # e.g. functools.partial(...), an import
            self.facts.entry_followed = False
            return self.facts
        names = [a.arg for a in node.args.posonlyargs + node.args.args]
        if entry.obj is not None:
            names = names[1:]
        args = [self.contract_value(spec, names[i] if i < len(names) else spec.name, node.lineno)
                for i, spec in enumerate(self.task.args)]
        result = self.invoke(key, args, {}, entry.obj, node.lineno)
        for part in (result.elts or ()) + (result,):
            if part.mixed:
                self.cross_row(part.mixed, node.lineno, "the returned output")
        return self.facts

    def contract_value(self, spec, name: str, line: int) -> Val:
        if spec.kind == "scalar":
            return Val(const=spec.value)
        dims = []
        for i, axis in enumerate(spec.axes):
            if spec.batched and i == 0:
                dims.append(Val(batch=Origin(line, f"{name}.shape[0]", row_count=True)))
            elif spec.padded_axis == axis:
                text = f"{name}.shape[{i}], the batch-wide padded length {axis}"
                dims.append(Val(batch=Origin(line, text)))
            else:
                dims.append(CLEAN)
        integer = spec.dtype in ops.INTEGER_DTYPES
        return Val(tensor=True, rows=name if spec.batched else None, dims=tuple(dims), integer=integer)

    # -- recording ---------------------------------------------------------------------------
    def cross_row(self, origin: Origin, line: int, sink: str) -> None:
        if all(c.origin != origin for c in self.facts.cross_rows):
            self.facts.cross_rows.append(CrossRow(origin, line, sink))

    def torch_effect(self, name: str) -> None:
        if name not in ops.LAYOUT:
            self.effects.append(f"torch.{name}")

    # -- calls -------------------------------------------------------------------------------
    def invoke(self, key: str, args: list[Val], kwargs: dict[str, Val], self_obj: Obj | None,
               line: int) -> Val:
        node, closure = self.callables.get(key, (None, None))
        if node is None:
            return combine([*args, *kwargs.values()])
        if isinstance(node, ast.ClassDef):
            return self.instantiate(node, args, kwargs, line)
        if key in self.stack or len(self.stack) >= MAX_CALL_DEPTH:
            return combine([*args, *kwargs.values()])
        env: dict[str, Val] = dict(closure) if closure is not None else {}
        fargs = node.args
        params = [a.arg for a in fargs.posonlyargs + fargs.args]
        if fargs.defaults:  # defaults belong to the last positional parameters
            for p, d in zip(params[-len(fargs.defaults):], fargs.defaults, strict=True):
                env[p] = self.expr(d, dict(self.globals))
        is_static = isinstance(node, ast.FunctionDef) and any(
            dotted(d) == "staticmethod" for d in node.decorator_list)
        if self_obj is not None and params and not is_static:
            env[params[0]] = Val(obj=self_obj)
            params = params[1:]
        for a, d in zip(fargs.kwonlyargs, fargs.kw_defaults, strict=True):
            if d is not None:
                env[a.arg] = self.expr(d, dict(self.globals))
        for i, v in enumerate(args):
            if i < len(params):
                env[params[i]] = v
        if fargs.vararg:
            env[fargs.vararg.arg] = Val(elts=tuple(args[len(params):]))
        for k, v in kwargs.items():
            env[k] = v
        if fargs.kwarg:
            env[fargs.kwarg.arg] = Val(obj=Obj("<dict>", dict(kwargs)))
        self.stack.append(key)
        try:
            if isinstance(node, ast.Lambda):
                return self.expr(node.body, env)
            frame = Frame()
            self.block(node.body, env, frame)
            return join_all(frame.returns) if frame.returns else CLEAN
        finally:
            self.stack.pop()

    def instantiate(self, cls: ast.ClassDef, args: list[Val], kwargs: dict[str, Val], line: int) -> Val:
        obj = Obj(cls.name)
        if f"{cls.name}.__init__" in self.callables:
            self.invoke(f"{cls.name}.__init__", args, kwargs, obj, line)
        else:  # a dataclass or NamedTuple: fields in declaration order
            fields = [i.target.id for i in cls.body
                      if isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name)]
            for i, name in enumerate(fields):
                if i < len(args):
                    obj.attrs[name] = args[i]
            for k, v in kwargs.items():
                obj.attrs[k] = v
        return Val(obj=obj)

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

    def call(self, node: ast.Call, env: dict[str, Val]) -> Val:
        func = node.func
        if isinstance(func, ast.Subscript):
            callee = self.expr(func.value, env)
            kernels = sorted(k for k in callee.funcs if k in self.kernels)
            if kernels:
                grid = self.expr(func.slice, env)
                args, kwargs = self.arguments(node, env)
                return self.paths(node, callee, kernels,
                                  lambda k: self.launch(k, node, args, kwargs, grid, env))
        args, kwargs = self.arguments(node, env)
        qualified = self.qualify(func, env)
        leaf = qualified.split(".")[-1] if qualified else getattr(func, "attr", "")
        if qualified.startswith("torch.") and not qualified.startswith(("torch.cuda", "torch.library")):
            return self.torch_call(leaf, args, kwargs, node)
        if qualified in _SCALAR_FUNCS or (isinstance(func, ast.Name) and func.id in _SCALAR_FUNCS
                                          and func.id not in env and func.id not in self.globals):
            return self.scalar_call(qualified or func.id, args, kwargs)
        if isinstance(func, ast.Name) and func.id in {"len", "range", "list", "tuple", "sorted", "reversed",
                                                      "enumerate", "zip", "isinstance", "print", "getattr",
                                                      "hasattr", "str", "iter", "next"} \
                and func.id not in env and func.id not in self.globals:
            return self.builtin(func.id, args, node)
        if qualified in _KNOWN_ON_GPU:
            return Val(const=_KNOWN_ON_GPU[qualified])
        if qualified:
            return combine([*args, *kwargs.values()])
        if isinstance(func, ast.Attribute):
            receiver = self.expr(func.value, env)
            if func.attr in {"append", "extend", "insert"} and receiver.elts is not None:
                if isinstance(func.value, ast.Name):
                    added = args[-1:]
                    if func.attr == "extend" and args:
                        added = list(args[0].elts or args[:1])
                    env[func.value.id] = Val(elts=receiver.elts + tuple(added))
                return CLEAN
            if receiver.tensor:
                return self.torch_call(func.attr, args, kwargs, node, receiver=receiver)
            if receiver.obj is None and not receiver.funcs:
                if func.attr in {"append", "extend", "insert"} and isinstance(func.value, ast.Name):
                    env[func.value.id] = join(env.get(func.value.id, CLEAN), combine(args) if args else CLEAN)
                if func.attr == "get" and receiver.elts is not None:
                    return join_all(receiver.elts).derived(flat_batch(args[0]) if args else None)
                return combine([receiver, *args, *kwargs.values()])
        callee = self.expr(func, env)
        if callee.funcs:
            keys = sorted(callee.funcs)

            def run(key: str) -> Val:
                if key.startswith("@"):  # a torch function held in a variable: `_mm = torch.mm`
                    return self.torch_call(key.rsplit(".", 1)[-1], args, kwargs, node)
                return self.invoke(key, args, kwargs, callee.obj, node.lineno)
            return self.paths(node, callee, keys, run)
        if callee.obj is not None and f"{callee.obj.cls}.__call__" in self.callables:
            return self.invoke(f"{callee.obj.cls}.__call__", args, kwargs, callee.obj, node.lineno)
        return combine([*args, *kwargs.values()])

    def paths(self, node: ast.Call, callee: Val, keys: list[str], run) -> Val:
        """Call one of several callees; when the choice is batch-derived, that is a dispatch."""
        if len(keys) == 1:
            return run(keys[0])
        results, paths = [], []
        for key in keys:
            start = len(self.effects)
            results.append(run(key))
            paths.append(self.effects[start:])
        origin = flat_batch(callee)
        if origin is not None:
            self.facts.dispatches.append(Dispatch(node.lineno, short(node.func), origin, paths))
        return join_all(results)

    def arguments(self, node: ast.Call, env: dict[str, Val]) -> tuple[list[Val], dict[str, Val]]:
        args: list[Val] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                value = self.expr(a.value, env)
                args.extend(value.elts if value.elts is not None else [value])
            else:
                args.append(self.expr(a, env))
        kwargs: dict[str, Val] = {}
        for k in node.keywords:
            value = self.expr(k.value, env)
            if k.arg:
                kwargs[k.arg] = value
            elif value.obj is not None:
                kwargs.update(value.obj.attrs)
        return args, kwargs

    def scalar_call(self, name: str, args: list[Val], kwargs: dict[str, Val]) -> Val:
        if len(args) == 1 and args[0].elts is not None and name in {"min", "max", "sum", "math.prod"}:
            args = list(args[0].elts)
        fn = _SCALAR_FUNCS.get(name)
        const = _fold_call(fn, args) if fn else NOCONST
        if name in {"min", "max"} and len(args) == 1 and args[0].tensor:
            return combine(args)
        return combine([*args, *kwargs.values()], const=const)

    def builtin(self, name: str, args: list[Val], node: ast.Call) -> Val:
        if name == "len" and args:
            value = args[0]
            if value.tensor:
                return self.dim(value, 0, node.lineno)
            if value.elts is not None:
                return Val(const=len(value.elts))
            return Val(batch=flat_batch(value))
        if name in {"list", "tuple", "sorted", "reversed", "iter"} and args:
            return args[0]
        if name == "next" and args:
            return join_all(args[0].elts) if args[0].elts else args[0]
        if name in {"isinstance", "print", "hasattr", "str"}:
            return CLEAN
        return combine(args)

    def launch(self, kernel: str, node: ast.Call, args: list[Val], kwargs: dict[str, Val], grid: Val,
               env: dict[str, Val]) -> Val:
        info = self.kernels[kernel]
        params: dict[str, Val] = {p: Val(const=d) for p, d in info.defaults.items()}
        options: dict[str, Val] = {}
        for i, v in enumerate(args):
            if i < len(info.params):
                params[info.params[i]] = v
        for k, v in kwargs.items():
            if k in info.params:
                params[k] = v
            elif k in LAUNCH_OPTIONS:
                options[k] = v
        axes: tuple[Val, ...] | None
        if grid.funcs:
            meta = Val(obj=Obj("<dict>", dict(params)))
            value = join_all(self.invoke(k, [meta], {}, None, node.lineno) for k in sorted(grid.funcs))
            axes = value.elts if value.elts is not None else (value,)
        else:
            axes = grid.elts if grid.elts is not None else (grid,)
        launch = Launch(kernel, node.lineno, params, options, axes)
        self.facts.launches.append(launch)
        self.effects.append(launch)
        for p, v in params.items():
            for part in (v.elts or ()) + (v,):
                if part.mixed:
                    self.cross_row(part.mixed, node.lineno, f"argument `{p}` of `{kernel}`")
        return CLEAN

    # -- expressions -------------------------------------------------------------------------
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
            for t, scalar in ((left, right), (right, left)):
                origin = flat_batch(scalar)
                if t.tensor and t.rows and not t.integer and not scalar.tensor and origin is not None:
                    self.facts.row_arithmetic.append(RowArithmetic(node.lineno, short(node), origin))
            const = NOCONST
            if left.known and right.known:
                try:
                    const = eval(compile(ast.Expression(ast.BinOp(ast.Constant(left.const), node.op,
                                                                  ast.Constant(right.const))), "", "eval"))
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
            if all(p.known for p in parts):
                try:
                    const = eval(compile(ast.Expression(ast.Compare(
                        ast.Constant(parts[0].const), node.ops, [ast.Constant(p.const) for p in parts[1:]])),
                        "", "eval"))
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
            return join_all(base.obj.attrs.values()).derived(flat_batch(index))
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


def read_host(tree: ast.Module, task: Task, kernels: dict[str, KernelInfo]) -> HostFacts:
    """Facts about the host code reachable from the task's entry function."""
    return HostReader(tree, task, kernels).run_entry()
