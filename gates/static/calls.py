"""Calls in the host analysis: same-file functions, methods and classes (followed, up to a
depth), torch and scalar library functions, Python builtins, and kernel launches.

A call whose callee is chosen by a batch-derived value runs every candidate callee and records a
dispatch with the work each one does; a launch records what is bound to each kernel parameter,
launch option and grid axis, and any row-mixed value passed to the kernel.
"""

from __future__ import annotations

import ast
import builtins
import math

from gates.static import ops
from gates.static.configs import LAUNCH_OPTIONS
from gates.static.control import Frame
from gates.static.facts import Dispatch, Launch, Unfollowed, short
from gates.static.kernels import dotted
from gates.static.values import CLEAN, NOCONST, Obj, Val, combine, flat_batch, join, join_all

MAX_CALL_DEPTH = 12


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


class CallSemantics:
    """Mixin of the host reader: the call part of its abstract interpretation."""

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
        if isinstance(func, ast.Name) and func.id == "getattr" and func.id not in env \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and node.args[1].value.isidentifier():
            # getattr(F, "log_softmax"), getattr(SETTINGS, "rows", 8192): the attribute itself.
            attribute = ast.Attribute(node.args[0], node.args[1].value, ast.Load())
            value = self.expr(ast.copy_location(attribute, node), env)
            if value == CLEAN and len(node.args) > 2:
                return self.expr(node.args[2], env)
            return value
        args, kwargs = self.arguments(node, env)
        qualified = self.qualify(func, env)
        leaf = qualified.split(".")[-1] if qualified else getattr(func, "attr", "")
        if ops.is_torch_function(qualified):
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
            if not (isinstance(func, ast.Name) and hasattr(builtins, func.id)):
                self.not_followed(node, qualified, [*args, *kwargs.values()])
            return combine([*args, *kwargs.values()])
        if isinstance(func, ast.Attribute):
            receiver = self.expr(func.value, env)
            kernels = sorted(k for k in receiver.funcs if k in self.kernels)
            if func.attr == "warmup" and kernels:
                # `kernel.warmup(*args, grid=..., BLOCK=...)` compiles with these constexprs; the
                # compiled kernel it returns launches with them.
                grid = kwargs.pop("grid", CLEAN)
                for k in kernels:
                    self.launch(k, node, args, kwargs, grid, env, effect=False)
                return Val(funcs=frozenset(kernels))
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
        if isinstance(func, ast.Name) and func.id not in env:  # a module-level name bound to a value
            self.not_followed(node, self.bound_to(func.id), [*args, *kwargs.values()])
        return combine([*args, *kwargs.values()])

    def not_followed(self, node: ast.Call, bound: str, args: list[Val]) -> None:
        """Record a call whose callee cannot be read when it receives a batched tensor's rows:
        what it does to them is unknown, which the verdict must say."""
        rows = next((e.rows for a in args for e in (a, *(a.elts or ())) if e.tensor and e.rows), None)
        if rows is not None:
            self.facts.unfollowed.append(Unfollowed(node.lineno, short(node.func), bound, rows))

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
               env: dict[str, Val], effect: bool = True) -> Val:
        """Record a launch; `effect=False` for a compile-only warmup, which computes nothing."""
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
        if effect:
            self.effects.append(launch)
        for p, v in params.items():
            for part in (v.elts or ()) + (v,):
                if part.mixed:
                    self.cross_row(part.mixed, node.lineno, f"argument `{p}` of `{kernel}`")
        return CLEAN
