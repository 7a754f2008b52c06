"""Reading a kernel's structure: an abstract interpretation of its body over block values.

Each value is described by the kernel parameters it depends on (`pid:a`/`nprog:a` for the program
id and program count of grid axis a) and, for a block, the parameters that set the extent of each
of its axes. Reductions record which parameters set the extent they reduce; loops that accumulate
record which set their bounds and step; same-file `@triton.jit` helpers are inlined.
"""

from __future__ import annotations

import ast

from gates.static.block_values import (
    BIT_OPS,
    EMPTY,
    KV,
    fold,
    merge,
    mix,
    untouched,
)
from gates.static.configs import read_autotune, read_heuristics
from gates.static.kernel_calls import KernelCalls
from gates.static.kernels import (
    KernelInfo,
    ReductionUse,
    Update,
    accumulators,
    arithmetic,
    call_leaf,
    data_part,
    dotted,
    pointer_params,
    survey,
    survey_loops,
)


class KernelReader(KernelCalls):
    """Walks one kernel (inlining same-file jit helpers) and records what shapes its reductions."""

    def __init__(self, info: KernelInfo, jit_functions: dict[str, ast.FunctionDef],
                 module_consts: dict[str, object]):
        self.info = info
        self.jit = jit_functions
        self.consts = module_consts
        self.depth = 0
        self.guards: list[tuple[str, str, object, bool]] = []
        self._seen: set[tuple] = set()
        self._updates: dict[int, list[Update]] = {}
        self.rounding = 0
        """Floating-point operations on data seen so far (arithmetic, math functions, sums, dots)."""

    # -- recording ---------------------------------------------------------------------------
    def use(self, deps: frozenset[str], role: str, line: int, branch: bool = False) -> None:
        key = (deps, role, line, branch)
        if not deps or key in self._seen:
            return
        self._seen.add(key)
        (self.info.branches if branch else self.info.uses).append(ReductionUse(deps, role, line))

    # -- statements --------------------------------------------------------------------------
    def block(self, body: list[ast.stmt], env: dict[str, KV]) -> KV | None:
        ret: KV | None = None
        for stmt in body:
            r = self.stmt(stmt, env)
            if r is not None:
                ret = r if ret is None else merge([ret, r])
        return ret

    def stmt(self, node: ast.stmt, env: dict[str, KV]) -> KV | None:
        if isinstance(node, ast.Assign):
            value = self.expr(node.value, env)
            for target in node.targets:
                self.bind(target, value, env)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.bind(node.target, self.expr(node.value, env), env)
        elif isinstance(node, ast.AugAssign):
            cur = self.expr(node.target, env)
            self.bind(node.target, mix([cur, self.expr(node.value, env)])._replace(ptr=cur.ptr), env)
        elif isinstance(node, ast.Expr):
            self.expr(node.value, env)
        elif isinstance(node, ast.Return):
            return self.expr(node.value, env) if node.value else EMPTY
        elif isinstance(node, ast.If):
            return self.branch(node, env)
        elif isinstance(node, (ast.For, ast.While)):
            return self.loop(node, env)
        elif isinstance(node, ast.With):
            return self.block(node.body, env)
        return None

    def branch(self, node: ast.If, env: dict[str, KV]) -> KV | None:
        test = self.expr(node.test, env)
        # A branch on loaded data or an atomic's result (a ticket) picks which program does some
        # work at run time; one that only computes addresses or masks computes the same values, and
        # so do paths that only select (loads, max/min, comparisons, integer arithmetic): no rounding.
        choice = test.deps and not test.data and not any(d.startswith(("pid:", "nprog:")) for d in test.deps)
        choice = choice and arithmetic(data_part(node.body, env)) != arithmetic(data_part(node.orelse, env))
        rounding = self.rounding
        guard = self.guard(node.test, env)
        rets = []
        envs = []
        for body, holds in ((node.body, True), (node.orelse, False)):
            local = dict(env)
            if guard:
                self.guards.append((*guard, holds))
            rets.append(self.block(body, local))
            if guard:
                self.guards.pop()
            envs.append(local)
        for name in set(envs[0]) | set(envs[1]):
            vals = [e[name] for e in envs if name in e]
            env[name] = vals[0] if len(vals) == 1 else merge(vals, shape=vals[0].shape, ptr=vals[0].ptr)
        if choice and self.rounding > rounding:
            self.use(test.deps, f"condition of the branch at line {node.lineno}", node.lineno, branch=True)
        rets = [r for r in rets if r is not None]
        return merge(rets) if rets else None

    def guard(self, test: ast.expr, env: dict[str, KV]) -> tuple[str, str, object] | None:
        """`if PARAM <op> CONST` on the kernel's own constexpr, evaluated later at each launch."""
        if self.depth or not isinstance(test, ast.Compare) or len(test.ops) != 1:
            return None
        left, right = test.left, test.comparators[0]
        if isinstance(left, ast.Name) and left.id in self.info.constexprs \
                and isinstance(right, ast.Constant) and untouched(env.get(left.id), left.id):
            return left.id, type(test.ops[0]).__name__, right.value
        return None

    def loop(self, node: ast.For | ast.While, env: dict[str, KV]) -> KV | None:
        line = node.lineno
        if isinstance(node, ast.For):
            it = node.iter
            args = it.args if isinstance(it, ast.Call) and call_leaf(it) in {"range", "static_range"} \
                else [it]
            vals = [self.expr(a, env) for a in args]
            if len(vals) == 3:
                bounds, step = merge(vals[:2]).deps, vals[2].deps
            else:
                bounds, step = merge(vals).deps, frozenset()
            self.bind(node.target, KV(deps=bounds | step, integer=True), env)
        else:
            bounds, step = self.expr(node.test, env).deps, frozenset()
        key = id(node)
        if key not in self._updates:
            self._updates.update(survey_loops(node))
        # Pointers advanced by `+=` and the induction variable of a while loop are not sums.
        skip = {n for n, v in env.items() if v.ptr}
        if isinstance(node, ast.While):
            skip |= {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        ret = None
        for _ in range(2):  # again when a carried value changed, so it reaches its uses
            before = dict(env)
            ret = self.block(node.body, env)
            changed = False
            for name, value in before.items():
                if env.get(name) is not value and env.get(name) != value:
                    merged = merge([value, env[name]], shape=env[name].shape, ptr=env[name].ptr)
                    changed = changed or merged != value
                    env[name] = merged
            if not changed:
                break
        # Integer accumulators (tile ids, counters) are exact in any order.
        skip |= {n for n, v in env.items() if v.integer}
        if accumulators(self._updates.get(key, []), skip):
            self.use(bounds, "bound of the accumulating loop", line)
            self.use(step, "step of the accumulating loop", line)
        self.block(node.orelse, env)
        return ret

    def bind(self, target: ast.expr, value: KV, env: dict[str, KV]) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, t in enumerate(target.elts):
                part = value.elts[i] if value.elts and i < len(value.elts) else KV(deps=value.deps)
                self.bind(t, part, env)

    # -- expressions -------------------------------------------------------------------------
    def expr(self, node: ast.expr | None, env: dict[str, KV]) -> KV:
        if node is None:
            return EMPTY
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            value = self.consts.get(node.id)
            return KV(const=value, integer=isinstance(value, int)) \
                if isinstance(value, (int, float, bool)) else EMPTY
        if isinstance(node, ast.Constant):
            return KV(const=node.value, integer=isinstance(node.value, int))
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left, env), self.expr(node.right, env)
            if left.mask and right.mask:  # (rows < T) & (cols < H)
                return merge([left, right])
            out = mix([left, right])._replace(const=fold(node.op, left.const, right.const))
            if isinstance(node.op, BIT_OPS):
                out = out._replace(integer=True)
            elif isinstance(node.op, ast.Div):
                out = out._replace(integer=False)
            if out.data and not out.integer and not out.ptr:  # pointer arithmetic does not round
                self.rounding += 1
            return out
        if isinstance(node, ast.UnaryOp):
            return self.expr(node.operand, env)
        if isinstance(node, (ast.BoolOp, ast.Compare)):
            parts = node.values if isinstance(node, ast.BoolOp) else [node.left, *node.comparators]
            # A comparison selects; the parameters of its operands do not compute the selected values.
            return merge([self.expr(p, env) for p in parts])._replace(ptr=False, mask=True,
                                                                      mixed=frozenset())
        if isinstance(node, ast.IfExp):
            return merge([self.expr(node.test, env), self.expr(node.body, env),
                           self.expr(node.orelse, env)])
        if isinstance(node, (ast.Tuple, ast.List)):
            elts = tuple(self.expr(e, env) for e in node.elts)
            return KV(deps=merge(elts).deps if elts else frozenset(), elts=elts)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, env)
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value, env)
            if node.attr == "T" and base.shape:
                return base._replace(shape=tuple(reversed(base.shape)))
            return KV(deps=base.deps) if isinstance(node.value, ast.Name) and node.value.id in env else EMPTY
        if isinstance(node, ast.Call):
            return self.call(node, env)
        return EMPTY

    def subscript(self, node: ast.Subscript, env: dict[str, KV]) -> KV:
        base = self.expr(node.value, env)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        index = [self.expr(i, env) for i in items
                 if not isinstance(i, ast.Slice) and not (isinstance(i, ast.Constant) and i.value is None)]
        if base.elts is not None and len(items) == 1 and isinstance(items[0], ast.Constant) \
                and isinstance(items[0].value, int) and -len(base.elts) <= items[0].value < len(base.elts):
            return base.elts[items[0].value]
        shape = None
        if base.shape is not None:
            dims = list(base.shape)
            out, i = [], 0
            for item in items:
                if isinstance(item, ast.Constant) and item.value is None:
                    out.append(frozenset())
                elif isinstance(item, ast.Slice):
                    if i < len(dims):
                        out.append(dims[i])
                    i += 1
                else:
                    i += 1
            shape = tuple(out + dims[i:])
        return merge([base, *index])._replace(shape=shape, ptr=base.ptr)

def read_kernel(fn: ast.FunctionDef, jit_functions: dict[str, ast.FunctionDef],
                module_consts: dict[str, object], module_defs: dict[str, ast.AST]) -> KernelInfo:
    """The reduction structure, atomics, autotune and heuristics of one `@triton.jit` function."""
    params = [a.arg for a in fn.args.args]
    defaults: dict[str, object] = {}
    for arg, default in zip(fn.args.args[len(fn.args.args) - len(fn.args.defaults):], fn.args.defaults,
                            strict=True):
        if isinstance(default, ast.Constant):
            defaults[arg.arg] = default.value
    constexprs = {a.arg for a in fn.args.args
                  if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}
    info = KernelInfo(fn.name, fn.lineno, params, defaults, constexprs)
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call):
            leaf = dotted(dec.func).split(".")[-1]
            if leaf == "autotune":
                info.autotune = read_autotune(dec, module_defs)
            elif leaf == "heuristics":
                info.heuristics += read_heuristics(dec, module_defs)
    loops, calls = survey(fn)
    pointers = pointer_params(calls, params)
    env = {p: KV(deps=frozenset({p}), ptr=p in pointers, integer=p not in pointers) for p in params}
    reader = KernelReader(info, jit_functions, module_consts)
    reader._updates = loops
    info.arithmetic = arithmetic(data_part(fn.body, env))
    reader.block(fn.body, env)
    return info
