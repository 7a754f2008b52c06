"""Rules for state a kernel carries from call to call and for control flow on addresses and the
clock (BI010, BI011): a counter, a cache keyed on identity or values, a choice made from
`data_ptr()` let a candidate be honest for the calls an audit makes and not after, or at the
arena's offsets and not at a serving engine's. Caches keyed on shapes, dtypes and devices and
alignment checks before vectorised loads are what libraries do: warnings at most."""

from __future__ import annotations

import ast
import functools

from gates.static.module_view import (
    ADDRESS_BUILTINS,
    ADDRESS_CALLS,
    CLOCK_CALLS,
    DATA_CALLS,
    ENV_READS,
    KEYED,
    MUTATORS,
    SHAPE_ATTRS,
    SHAPE_CALLS,
    Module,
    assignments,
    base_name,
    bound_names,
    module_of,
    register,
    source_text,
)
from gates.static.rules import Analysis


# -- BI010 -------------------------------------------------------------------------------------
def _reads(node: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node)
    )




def _locals_of(fn: ast.AST) -> set[str]:
    """Names a function binds itself (parameters, assignments, loops), so not module state."""
    names = {p.arg for p in ast.walk(fn.args) if isinstance(p, ast.arg)} if hasattr(fn, "args") else set()
    declared = {n for s in ast.walk(fn) if isinstance(s, (ast.Global, ast.Nonlocal)) for n in s.names}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fn:
            names.add(node.name)
    return names - declared


def _mutable_defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Parameters whose default is a mutable display (`_n=[0]`): state kept across calls."""
    args = fn.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
    pairs += [(p, d) for p, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    return {p.arg for p, d in pairs if isinstance(d, (ast.List, ast.Dict, ast.Set))}


def _aliases(fn: ast.AST, state: set[str]) -> dict[str, str]:
    """Locals bound to a module-level container itself (`st = _STATE`), not to an element of it."""
    found = {}
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Name)
            and node.value.id in state
        ):
            found[node.targets[0].id] = node.value.id
    return found


def _elements(fn: ast.AST, state: set[str]) -> set[str]:
    """Locals bound to an element of module-level state (`st = _STATE.get(dev)`, `st = _STATE[dev]`)."""
    found = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr in ("get", "setdefault", "pop")
            ):
                value = value.func.value
            if isinstance(value, ast.Subscript):
                value = value.value
            if isinstance(value, ast.Name) and value.id in state and value is not node.value:
                found.add(node.targets[0].id)
    return found






def _bad_key(m: Module, key: ast.AST, fn: ast.AST, tensors: set[str], depth: int = 0) -> str | None:
    """What makes a cache key more than shapes, dtypes and devices: an address, a tensor's identity or
    values, a counter, the clock or the environment; None for a key of shapes and constants."""
    assigned = assignments(fn)
    for node in ast.walk(key):
        if isinstance(node, ast.Call):
            name = m.qual(node.func)
            leaf = node.func.attr if isinstance(node.func, ast.Attribute) else name
            if leaf in ADDRESS_CALLS or name in ADDRESS_BUILTINS:
                return f"an address (`{source_text(node)}`)"
            if leaf in DATA_CALLS and not (
                isinstance(node.func, ast.Name) and leaf in ("sum", "max", "min", "any", "all")
            ):
                return f"a tensor's values (`{source_text(node)}`)"
            if (
                name in ("hash", "next")
                or name in CLOCK_CALLS
                or name in ENV_READS
                or name.rsplit(".", 1)[0] in ENV_READS
            ):
                return f"`{source_text(node)}`"
        elif isinstance(node, ast.Attribute) and node.attr in ADDRESS_CALLS:
            return f"an address (`{source_text(node)}`)"
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            parent = m.parents.get(node)
            shaped = isinstance(parent, ast.Attribute) and (parent.attr in SHAPE_ATTRS | SHAPE_CALLS)
            if (
                node.id in tensors
                and not shaped
                and not (isinstance(parent, ast.Call) and parent.args and m.qual(parent.func) in ("len",))
            ):
                return f"the tensor `{node.id}` itself (its identity)"
            if m.state.get(node.id) in ("container", "counter") and not shaped and node.id not in _tables(m):
                return f"module-level state `{node.id}`"
            if depth < 3 and node.id in assigned and not shaped:
                for value in assigned[node.id]:
                    why = _bad_key(m, value, fn, tensors, depth + 1)
                    if why:
                        return why
    return None


READ_METHODS = {"get", "keys", "values", "items", "copy", "__contains__", "__getitem__", "count", "index"}


@functools.lru_cache(maxsize=64)
def _tables(m: Module) -> frozenset[str]:
    """The module-level containers no call can change: inside functions each is only indexed, tested
    for membership, or read through `get`/`keys`/`values`/`items` (a constant table, such as a
    library's mapping of mode names), and the module's own statements only fill it. Any other use
    (passed on, aliased, a mutating method, `global`) counts as a write. A key read from such a
    table is no state across calls (`_bad_key`); a table looked up by a tensor's values, identity
    or address still is."""
    kept = {n for n, k in m.state.items() if k == "container"}
    for node in ast.walk(m.tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            kept -= set(node.names)
        if not isinstance(node, ast.Name) or node.id not in kept:
            continue
        parent = m.parents.get(node)
        inside = _in_function(m, node)
        if isinstance(node.ctx, ast.Store) and not inside:
            continue  # its definition
        if isinstance(node.ctx, ast.Load):
            if isinstance(parent, ast.Subscript) and parent.value is node:
                if isinstance(parent.ctx, ast.Load) or not inside:
                    continue  # indexed; or filled by the module's own statements
            elif isinstance(parent, ast.Compare) and node in parent.comparators and all(
                isinstance(o, (ast.In, ast.NotIn)) for o in parent.ops
            ):
                continue
            elif (
                isinstance(parent, ast.Attribute)
                and parent.attr in READ_METHODS
                and isinstance(m.parents.get(parent), ast.Call)
                and m.parents[parent].func is parent
            ):
                continue
        kept.discard(node.id)
    return frozenset(kept)


def _in_function(m: Module, node: ast.AST) -> bool:
    while node in m.parents:
        node = m.parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


def _tensor_params(a: Analysis, fn: ast.AST) -> set[str]:
    """The entry's tensor parameters, by the task's contract (by position)."""
    if getattr(fn, "name", None) != a.task.entry:
        return set()
    params = [p.arg for p in fn.args.posonlyargs + fn.args.args]
    return {p for p, spec in zip(params, a.task.args, strict=False) if spec.kind == "tensor"}


@register(
    "BI010",
    "state kept across calls: a counter, a cache keyed on more than shapes, the clock",
    "Keep no state that a call both reads and writes besides caches keyed on shapes, dtypes and devices "
    "(compiled kernels, SM counts, workspaces): no call counters (global n; n += 1, fn.calls += 1, "
    "next(itertools.count())), no caches keyed on data_ptr(), id(x), a tensor or its values, and no "
    "branches on the clock. The same inputs must give the same result on the first call and the millionth.",
)
def hidden_state(a: Analysis):
    m = module_of(a)
    if m is None:
        return
    containers = {n for n, k in m.state.items() if k == "container"}
    for fn in m.functions():
        own = _locals_of(fn)
        declared = {n for s in ast.walk(fn) if isinstance(s, (ast.Global, ast.Nonlocal)) for n in s.names}
        defaults = _mutable_defaults(fn)
        aliases = _aliases(fn, containers | defaults)
        state = {n for n in m.state if n not in own} | declared | defaults | set(aliases)
        mutable = (
            (containers - own)
            | defaults
            | set(aliases)
            | {n for n in declared if m.state.get(n) == "container"}
        )
        elements = _elements(fn, mutable)
        tensors = _tensor_params(a, fn)
        guards = [n for n in ast.walk(fn) if isinstance(n, (ast.If, ast.IfExp))]
        for node in ast.walk(fn):
            if m.in_jit(node):
                continue
            if isinstance(node, ast.AugAssign):
                target = node.target
                base = base_name(target)
                if isinstance(target, ast.Name) and target.id in declared:
                    yield (
                        node.lineno,
                        (
                            f"`{source_text(node)}` updates `{target.id}`, kept across calls "
                            f"(`global`/`nonlocal`): a call counter lets the kernel behave one way "
                            f"for the calls an audit makes and another after"
                        ),
                    )
                elif base is not None and base is not target and base.id in state | mutable:
                    yield (
                        node.lineno,
                        (
                            f"`{source_text(node)}` updates module-level state `{base.id}` on every call: "
                            f"a counter lets the kernel behave one way for the calls an audit "
                            f"makes and another after"
                        ),
                    )
                elif base is not None and base is not target and base.id in elements:
                    yield (
                        node.lineno,
                        (
                            f"`{source_text(node)}` updates an entry of module-level state on every "
                            f"call (a generation or call counter); the result must not depend "
                            f"on it (tagging workspace words is fine)."
                        ),
                        "warning",
                    )
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    yield from _assigned_state(m, fn, node, target, declared, state, mutable, tensors, guards)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in mutable
                and node.func.attr in MUTATORS
            ):
                name = node.func.value.id
                if node.func.attr in KEYED and node.args:
                    why = _bad_key(m, node.args[0], fn, tensors)
                    if why:
                        yield (
                            node.lineno,
                            (
                                f"`{source_text(node)}` keys module-level `{name}` on {why}: state "
                                f"keyed on more than shapes, dtypes and devices tells calls apart "
                                f"that a serving engine makes differently from an audit"
                            ),
                        )
                elif node.func.attr in ("append", "appendleft", "extend", "insert") and _counted(
                    m, name, aliases
                ):
                    yield (
                        node.lineno,
                        (
                            f"`{source_text(node)}` grows module-level `{name}` on every call and its "
                            f"length is read: a call counter"
                        ),
                    )
            elif (
                isinstance(node, ast.Call)
                and m.qual(node.func) == "next"
                and node.args
                and isinstance(node.args[0], ast.Name)
                and m.state.get(node.args[0].id) == "counter"
                and node.args[0].id not in own
            ):
                yield (
                    node.lineno,
                    (
                        f"`{source_text(node)}` draws from module-level counter `{node.args[0].id}`: "
                        f"the kernel can count its calls"
                    ),
                )
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and isinstance(node.value, ast.Name)
                and node.value.id in mutable
            ):
                why = _bad_key(m, node.slice, fn, tensors)
                if why:
                    yield (
                        node.lineno,
                        (
                            f"`{source_text(node)}` looks up module-level `{node.value.id}` by {why}: "
                            f"state keyed on more than shapes, dtypes and devices"
                        ),
                    )
            elif (
                isinstance(node, ast.Compare)
                and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops)
                and any(isinstance(c, ast.Name) and c.id in mutable for c in node.comparators)
            ):
                why = _bad_key(m, node.left, fn, tensors)
                if why:
                    yield (
                        node.lineno,
                        (
                            f"`{source_text(node)}` tests membership in module-level state by {why}: "
                            f"the kernel can tell inputs it has seen from new ones"
                        ),
                    )
    yield from _clock(m)


def _counted(m: Module, name: str, aliases: dict[str, str]) -> bool:
    """Whether the length of a module-level container (or an alias of it) is read anywhere."""
    names = {name, aliases.get(name, name)} | {k for k, v in aliases.items() if v == name}
    for node in m.nodes():
        if (
            isinstance(node, ast.Call)
            and m.qual(node.func) == "len"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in names
        ):
            return True
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in names
            and isinstance(node.slice, (ast.UnaryOp, ast.Constant))
            and isinstance(node.ctx, ast.Load)
        ):
            return True  # `_calls[-1]`, `_calls[99]`: only as deep as the calls reached
    return False


def _assigned_state(m, fn, node, target, declared, state, mutable, tensors, guards):
    if isinstance(target, ast.Name) and target.id in declared:
        if _reads(node.value, target.id):
            yield (
                node.lineno,
                (
                    f"`{source_text(node)}` sets `{target.id}`, kept across calls, from its own value: a "
                    f"call counter or toggle lets the kernel behave one way for the calls an "
                    f"audit makes and another after"
                ),
            )
        elif not any(_reads(g.test, target.id) and any(n is node for n in ast.walk(g)) for g in guards):
            yield (
                node.lineno,
                (
                    f"`{source_text(node)}` sets `{target.id}`, kept across calls, on every call: state a "
                    f"later call reads; initialise it once (`if {target.id} is None:`) from "
                    f"shapes and devices only."
                ),
                "warning",
            )
        return
    base = base_name(target)
    if base is None or base is target or base.id not in state | mutable:
        return
    if isinstance(target, ast.Subscript) and target.value is base and base.id in mutable:
        why = _bad_key(m, target.slice, fn, tensors)
        if why:
            yield (
                node.lineno,
                (
                    f"`{source_text(node)}` stores into module-level `{base.id}` keyed on {why}: state "
                    f"keyed on more than shapes, dtypes and devices tells apart calls a serving "
                    f"engine makes from those an audit makes"
                ),
            )
        elif _reads(node.value, base.id):
            yield (
                node.lineno,
                (
                    f"`{source_text(node)}` updates module-level `{base.id}` from its own value on every "
                    f"call: a counter lets the kernel behave one way for the calls an audit "
                    f"makes and another after"
                ),
            )
        return
    if _reads(node.value, base.id):  # `rms_norm.calls = getattr(rms_norm, "calls", 0) + 1`
        yield (
            node.lineno,
            (
                f"`{source_text(node)}` updates state kept on `{base.id}` from its own value on every "
                f"call: a counter lets the kernel behave one way for the calls an audit makes "
                f"and another after"
            ),
        )


def _clock(m: Module):
    """Comparisons of the clock (or names assigned from it): a time bomb's trigger."""
    clocked: set[str] = set()
    for node in m.nodes():
        if (
            isinstance(node, (ast.Assign, ast.AnnAssign))
            and node.value is not None
            and _has_clock(m, node.value, clocked)
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            clocked |= {n for t in targets for n in bound_names(t)}
    for node in m.nodes():
        if isinstance(node, ast.Compare) and _has_clock(m, node, clocked):
            yield (
                node.lineno,
                (
                    f"`{source_text(node)}` compares the clock: the kernel can behave differently "
                    f"after a date or a time no audit waits for"
                ),
            )
        elif (
            isinstance(node, ast.Call) and m.qual(node.func) in CLOCK_CALLS and not _has_clock_parent(m, node)
        ):
            yield (
                node.lineno,
                (f"`{source_text(node)}` reads the clock; a kernel's result must not depend on when it "
                 f"runs."),
                "warning",
            )


def _has_clock(m: Module, node: ast.AST, clocked: set[str]) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and m.qual(n.func) in CLOCK_CALLS:
            return True
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in clocked:
            return True
    return False


def _has_clock_parent(m: Module, node: ast.AST) -> bool:
    parent = m.parents.get(node)
    while parent is not None and not isinstance(parent, ast.stmt):
        if isinstance(parent, ast.Compare):
            return True
        parent = m.parents.get(parent)
    return False


# -- BI011 -------------------------------------------------------------------------------------
def _address_source(m: Module, node: ast.AST, tainted: set[str]) -> bool:
    if isinstance(node, ast.Call):
        name = m.qual(node.func)
        leaf = node.func.attr if isinstance(node.func, ast.Attribute) else name
        return leaf in ("data_ptr", "storage_offset") or name in ADDRESS_BUILTINS
    if isinstance(node, ast.Attribute) and node.attr in (
        "__array_interface__",
        "__cuda_array_interface__",
        "_cdata",
    ):
        return True
    return isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in tainted


def _address_valued(m: Module, node: ast.AST, tainted: set[str]) -> bool:
    """Whether an expression's value is an address (or arithmetic on one), not a test of it."""
    if _address_source(m, node, tainted):
        return True
    if isinstance(node, ast.BinOp):
        return _address_valued(m, node.left, tainted) or _address_valued(m, node.right, tainted)
    if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
        return _address_valued(m, node.operand, tainted)
    if isinstance(node, ast.Call) and m.qual(node.func) in ("int", "abs") and node.args:
        return _address_valued(m, node.args[0], tainted)
    return False


def _ops(node: ast.AST) -> set[type]:
    return {type(n.op) for n in ast.walk(node) if isinstance(n, ast.BinOp)}


@register(
    "BI011",
    "control flow or arithmetic on a tensor's address",
    "Do not choose a block size, split or code path from data_ptr(), storage_offset() or id(): a serving "
    "engine places tensors at other offsets than an audit, so the choice differs in production. A copy "
    "to an aligned buffer or a vectorised path that computes the same bits is fine; keep the reduction "
    "order the same for every alignment.",
)
def addresses(a: Analysis):
    m = module_of(a)
    if m is None:
        return
    tainted: set[str] = set()
    for _ in range(3):  # names assigned from addresses, to a fixpoint of short chains
        for node in m.nodes():
            if isinstance(node, ast.Assign) and _address_valued(m, node.value, tainted):
                tainted |= {n for t in node.targets for n in bound_names(t)}
    seen: set[int] = set()
    for node in m.nodes():
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            valued = [s for s in sides if _address_valued(m, s, tainted)]
            if not valued:
                continue
            seen |= {id(n) for s in valued for n in ast.walk(s)}
            if len(valued) == len(sides) and all(
                isinstance(o, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) for o in node.ops
            ):
                continue  # aliasing: the same buffer or not
            others = [s for s in sides if s not in valued]
            zero = all(isinstance(s, ast.Constant) and s.value == 0 for s in others)
            aligned = all(_ops(s) & {ast.Mod, ast.BitAnd} and _vector_width(s) for s in valued)
            chooses = (
                isinstance(m.parents.get(node), ast.IfExp)
                and m.parents[node].test is node
                and all(isinstance(v, ast.Constant) for v in (m.parents[node].body, m.parents[node].orelse))
            )
            if zero and aligned and not chooses and all(isinstance(o, (ast.Eq, ast.NotEq)) for o in node.ops):
                yield (
                    node.lineno,
                    (
                        f"`{source_text(node)}` tests a tensor's alignment; a serving engine places "
                        f"tensors at other offsets than the audit, so both paths must compute the "
                        f"same bits (the dynamic gate varies the offsets)."
                    ),
                    "warning",
                )
            else:
                yield (
                    node.lineno,
                    (
                        f"`{source_text(node)}` compares a tensor's address: the outcome differs "
                        f"between the audit's buffers and a serving engine's, so the kernel can "
                        f"behave differently in production"
                    ),
                )
    for node in m.nodes():
        if (
            isinstance(node, ast.BinOp)
            and id(node) not in seen
            and _address_valued(m, node, tainted)
            and not isinstance(m.parents.get(node), ast.BinOp)
            and _ops(node) - {ast.BitOr}
            and not _pointer_offset(node)
        ):
            seen |= {id(n) for n in ast.walk(node)}
            yield (
                node.lineno,
                (
                    f"`{source_text(node)}` computes a value from a tensor's address: what it chooses "
                    f"differs between the audit's buffers and a serving engine's"
                ),
            )


VECTOR_BYTES = 16
"""The widest alignment a vectorised load or a TMA descriptor asks of an address (16 bytes)."""


def _vector_width(node: ast.AST) -> bool:
    """Whether every modulus or mask of an alignment test is at most a vector's width (`% 16`, `& 15`)."""
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mod, ast.BitAnd)):
            c = (
                n.right
                if isinstance(n.right, ast.Constant)
                else n.left
                if isinstance(n.left, ast.Constant)
                else None
            )
            if c is None or not isinstance(c.value, int):
                return False
            if c.value > (VECTOR_BYTES if isinstance(n.op, ast.Mod) else VECTOR_BYTES - 1):
                return False
    return True


def _pointer_offset(node: ast.BinOp) -> bool:
    """`x.data_ptr() + off`: an address moved, for a library call that takes raw pointers."""
    return isinstance(node.op, (ast.Add, ast.Sub)) and not (_ops(node) - {ast.Add, ast.Sub, ast.Mult})
