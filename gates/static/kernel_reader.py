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
    INT_PRESERVING,
    KV,
    broadcast,
    fold,
    int_dtype,
    merge,
    mix,
    untouched,
)
from gates.static.configs import read_autotune, read_heuristics
from gates.static.kernels import (
    EXACT_REDUCTIONS,
    SELECTIONS,
    SUM_REDUCTIONS,
    Atomic,
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

MAX_INLINE_DEPTH = 6


class KernelReader:
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
