"""Batch taint through a candidate's host code, starting from the task's entry function.

The entry's parameters are described from the task contract: a batched tensor's axis 0 (and a
padded axis such as decode_attention's L) is batch-derived. The reader then follows values
through assignments, arithmetic, ternaries, `min`/`max`, `triton.cdiv`, same-file helper functions
and classes, into kernel launches, and records facts for the rules: each launch with what is
bound to each kernel parameter and grid axis, torch ops applied to batched tensors, values
reduced across rows that reach an output, and branches on batch-derived values with the work
each path does. Nothing is executed.

The reader is one class assembled from mixins, one per kind of syntax: calls.py (calls and
launches), expressions.py, control.py (statements and branches) and tensors.py (torch calls).
This module holds the reader itself: declarations, the entry and the recording of facts.
"""

from __future__ import annotations

import ast

from gates.contract import Task
from gates.static import ops
from gates.static.calls import CallSemantics
from gates.static.control import ControlFlow, Frame
from gates.static.expressions import ExpressionSemantics
from gates.static.facts import CrossRow, HostFacts, Launch, short
from gates.static.kernels import KernelInfo, dotted
from gates.static.tensors import TensorSemantics
from gates.static.values import CLEAN, Origin, Val

__all__ = ["HostReader", "read_host"]


class HostReader(CallSemantics, ExpressionSemantics, ControlFlow, TensorSemantics):
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
        self.bindings: dict[str, tuple[int, str]] = {}
        """Module-level name -> (line, source) of the value last assigned to it, for messages."""
        # In file order, as Python runs it: `_lib = log_softmax` before `def log_softmax(...)`
        # keeps the imported function, which the later definition shadows.
        for stmt in tree.body:
            self.declare(stmt, self.globals, top=True)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self.stmt(stmt, self.globals, Frame())
            self.record_binding(stmt)
        for name in kernels:  # kernels, including those made by `k2 = triton.autotune(...)(k)`
            self.globals[name] = Val(funcs=frozenset({name}))
        self.effects.clear()
        self.facts = HostFacts()

    # -- declarations ------------------------------------------------------------------------
    def declare(self, stmt: ast.stmt, env: dict[str, Val], top: bool = False) -> None:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                name = a.asname or a.name.split(".")[0]
                self.aliases[name] = a.name if a.asname else a.name.split(".")[0]
                env.pop(name, None)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module:
            for a in stmt.names:
                self.aliases[a.asname or a.name] = f"{stmt.module}.{a.name}"
                env.pop(a.asname or a.name, None)
        elif isinstance(stmt, ast.FunctionDef):
            key = stmt.name if top else f"{stmt.name}@{stmt.lineno}"
            if top and key in self.callables and key not in self.kernels:
                # A redefinition (`_impl = rms_norm` then `def rms_norm(...): return _impl(...)`):
                # names bound to the earlier function keep it, as in Python.
                key = f"{stmt.name}@{stmt.lineno}"
            self.callables[key] = (stmt, None if top else env)
            env[stmt.name] = Val(funcs=frozenset({key}))
            if top:
                self.aliases.pop(stmt.name, None)
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
            if top:
                self.aliases.pop(stmt.name, None)
            if f"{stmt.name}.forward" in self.callables and f"{stmt.name}.apply" not in self.callables:
                # torch.autograd.Function: `Cls.apply(*args)` runs `Cls.forward(ctx, *args)`.
                apply = ast.parse(f"def apply(*args, **kwargs):\n"
                                  f"    return {stmt.name}.forward(None, *args, **kwargs)")
                self.callables[f"{stmt.name}.apply"] = (apply.body[0], None)

    def record_binding(self, stmt: ast.stmt) -> None:
        """Remember where and to what a top-level statement binds its names."""
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                if isinstance(target, ast.Name):
                    self.bindings[target.id] = (stmt.lineno, short(stmt.value))
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for a in stmt.names:
                name = a.asname or a.name.split(".")[0]
                self.bindings[name] = (stmt.lineno, self.aliases.get(name, ""))
        elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            self.bindings.pop(stmt.name, None)

    def bound_to(self, name: str) -> str:
        """What a module-level name is bound to, through chains of aliases (`b = a`, `from m import
        a as b`): `torch._C._nn.linear`, `functools.partial(_impl, block=128)`; "" if unknown."""
        seen: set[str] = set()
        text = ""
        while name not in seen and name in self.bindings:
            seen.add(name)
            text = self.bindings[name][1]
            root, _, rest = text.partition(".")
            if not root.isidentifier() or root not in self.bindings:
                break
            if rest:  # `_nn.linear` with `from torch._C import _nn`: the root's binding, qualified
                inner = self.bound_to(root) if root not in seen else ""
                return f"{inner}.{rest}" if inner.replace(".", "").isidentifier() else text
            name = root
        return text

    def library_function(self, qualified: str) -> Val:
        """A reference to a torch function (callable later through a variable); else clean."""
        if ops.is_torch_function(qualified):
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
        name = self.task.entry
        if name not in self.globals and name not in self.aliases:
            self.facts.entry_found = False
            self.facts.entry_followed = False
            return self.facts
        entry = self.expr(ast.Name(name, ast.Load()), {})  # through aliases, as a call would see it
        key = next(iter(sorted(entry.funcs)), "")
        node = self.callables.get(key, (None, None))[0]
        if entry.obj is not None:
            key = f"{entry.obj.cls}.__call__"
            node = self.callables.get(key, (None, None))[0]
        if key.startswith("@"):  # `from torch.nn.functional import linear`: the torch op itself
            self.call_bound_entry(name)
            return self.facts
        if not isinstance(node, ast.FunctionDef):  # e.g. functools.partial(...), an extension's function
            self.facts.entry_followed = False
            self.facts.entry_bound = self.bound_to(name)
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

    def call_bound_entry(self, name: str) -> None:
        """The entry bound to a callable without a `def` here, called as the task calls it, on the
        line that binds it."""
        line = self.bindings.get(name, (1, ""))[0]
        params = [spec.name for spec in self.task.args]
        env = {spec.name: self.contract_value(spec, spec.name, line) for spec in self.task.args}
        call = ast.Call(ast.Name(name, ast.Load()), [ast.Name(p, ast.Load()) for p in params], [],
                        lineno=line, col_offset=0)
        self.call(ast.fix_missing_locations(call), env)

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

def read_host(tree: ast.Module, task: Task, kernels: dict[str, KernelInfo]) -> HostFacts:
    """Facts about the host code reachable from the task's entry function."""
    return HostReader(tree, task, kernels).run_entry()
