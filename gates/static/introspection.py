"""Rules for code that can tell an audit from production: it inspects the call stack or the
process, reads the environment, keeps state across calls (counters, caches keyed on identity or
data), branches on addresses or the clock, hides attribute names from the reader, or runs code
it builds at run time (BI008, BI009, BI012, BI013; the state and address rules BI010 and BI011 are
`hidden_state`).

A batch-invariant kernel needs none of this to compute a row: its result depends on the row,
the unbatched inputs and constants. Each of these mechanisms lets a candidate behave one way
while the gates call it and another way in a serving engine (where no gate frame is on the
stack, a provider key is set, the call count runs past what an audit makes, inputs sit at other
offsets, the batch is larger than any the audit tried). Where the intent is unambiguous (a
stack walk, a call counter, code built from strings) the finding is an error; where real
libraries do it for a reason (an alignment check before vectorised loads, a configuration
variable, `inspect.signature`, a cache keyed on shapes) it is a warning or nothing.

The rules read the module's syntax tree (helpers inlined as for the other rules); `@triton.jit`
functions are skipped (Triton compiles them, none of this can run there).
"""

from __future__ import annotations

import ast

from gates.static.module_view import (
    CODE_CALLS,
    CONFIG_PREFIXES,
    ENV_READS,
    FRAME_ATTRS,
    FRAME_CALLS,
    JUDGE_WORDS,
    TRACE_SAFE,
    Module,
    assignments,
    base_name,
    is_reference,
    line_of,
    module_of,
    register,
    source_text,
)
from gates.static.rules import Analysis


# -- BI008 -------------------------------------------------------------------------------------
@register(
    "BI008",
    "the call stack or the running program inspected",
    "Remove every look at the call stack, frames, tracebacks and the running process (sys._getframe, "
    "inspect.stack/currentframe, traceback.extract_stack, f_back/f_code/f_globals, sys.argv, sys.modules, "
    "os.getpid): a kernel must compute the same result whoever calls it. Compute the result from the "
    "inputs only, in every caller.",
)
def frames(a: Analysis):
    m = module_of(a)
    if m is None:
        return
    for node in m.nodes():
        if isinstance(node, ast.Attribute) and node.attr in FRAME_ATTRS:
            yield (
                line_of(node),
                (
                    f"`{source_text(node)}` reads the attribute `{node.attr}` of a frame, traceback or "
                    f"code object: the kernel can tell who called it (an audit's checking code "
                    f"from a serving engine) and behave differently for each"
                ),
            )
            continue
        if (
            isinstance(node, ast.Name)
            and node.id == "__main__"
            or isinstance(node, ast.Import)
            and any(x.name == "__main__" for x in node.names)
        ):
            yield line_of(node), "imports or names `__main__`: the kernel can tell which program runs it"
            continue
        if not isinstance(node, (ast.Name, ast.Attribute, ast.Call)) or not is_reference(m, node):
            continue
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id == "getattr"):
            continue
        name = m.qual(node)
        if isinstance(node, ast.Name) and node.id not in m.imports:
            continue  # a local name, not an imported function
        if name in TRACE_SAFE:
            continue
        if name in FRAME_CALLS:
            yield (
                line_of(node),
                (
                    f"`{source_text(node)}` (`{name}`) looks at the call stack or the running process: "
                    f"the kernel can tell an audit's checking code from a serving engine"
                ),
            )
        elif name == "sys.modules" or name.startswith("sys.modules."):
            judged = _judge_literal(m, node)
            if judged:
                yield (
                    line_of(node),
                    (
                        f"`{source_text(m.parents.get(node, node))}` looks for `{judged}` among the loaded "
                        f"modules: the kernel can tell it is being judged"
                    ),
                )
            else:
                yield (
                    line_of(node),
                    (
                        f"`{source_text(node)}` reads which modules are loaded, which differs between "
                        f"an audit and a serving engine."
                    ),
                    "warning",
                )
        elif name.startswith(("inspect.", "traceback.")) and name.count(".") == 1:
            yield (
                line_of(node),
                (
                    f"`{source_text(node)}` uses `{name}`, a module for looking at live objects and "
                    f"frames; only stack and frame functions are errors, and this may be one "
                    f"the rules do not list."
                ),
                "warning",
            )


def _judge_literal(m: Module, node: ast.AST) -> str | None:
    """A string literal naming the judging code in the statement that uses `node`."""
    around = node
    while around in m.parents and not isinstance(around, ast.stmt):
        around = m.parents[around]
    if isinstance(around, (ast.If, ast.While)):
        around = around.test
    for n in ast.walk(around):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and JUDGE_WORDS.search(n.value):
            return n.value
    return None


# -- BI009 -------------------------------------------------------------------------------------
@register(
    "BI009",
    "the environment read",
    "Do not read environment variables in the kernel: the audit's runner has a minimal environment and a "
    "serving engine another (its provider keys, its host), so a kernel that reads them can behave "
    "differently in production. Take configuration as an argument or a module constant; library settings "
    "such as TRITON_INTERPRET are tolerated as a warning.",
)
def environment(a: Analysis):
    m = module_of(a)
    if m is None:
        return
    for node in m.nodes():
        if not isinstance(node, (ast.Name, ast.Attribute)) or not is_reference(m, node):
            if not (isinstance(node, ast.Attribute) and m.qual(node.value) in ENV_READS):
                continue
        name = m.qual(node)
        base = next((e for e in ENV_READS if name == e), None)
        if base is None:
            method = name.rsplit(".", 1)
            if (
                len(method) == 2
                and method[0] in ENV_READS
                and isinstance(node, ast.Attribute)
                and m.qual(node.value) in ENV_READS
            ):
                base = method[0]
                yield from _env_use(m, node.value, method[1], node)
            continue
        if isinstance(node, ast.Name) and node.id not in m.imports:
            continue
        parent = m.parents.get(node)
        if isinstance(parent, ast.Attribute):
            continue  # `os.environ.get(...)`: judged above through its method
        yield from _env_use(m, node, None, node)


def _env_use(m: Module, env: ast.AST, method: str | None, node: ast.AST):
    """One use of the environment: its key, and whether it enumerates or writes."""
    what = m.qual(env)
    call = m.parents.get(node)
    key: ast.AST | None = None
    if method is None and isinstance(call, ast.Call) and call.func is node:  # os.getenv("K")
        key = call.args[0] if call.args else None
    elif method is None and isinstance(call, ast.Subscript):
        key = call.slice
    elif (
        method is None
        and isinstance(call, ast.Compare)
        and any(isinstance(op, (ast.In, ast.NotIn)) for op in call.ops)
    ):
        key = call.left
    elif method in ("get", "pop", "setdefault", "__getitem__") and isinstance(call, ast.Call):
        key = call.args[0] if call.args else None
    text = source_text(m.parents.get(node, node))
    if key is None:
        yield (
            line_of(node),
            (
                f"`{text}` reads the whole environment (`{what}`): the audit's runner sees an "
                f"allow-listed environment, a serving engine its own (keys, host names), so "
                f"the kernel can behave differently in production"
            ),
        )
        return
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        yield (
            line_of(node),
            (
                f"`{text}` reads an environment variable whose name is computed (`{source_text(key)}`): "
                f"the kernel can behave differently where that variable is set, as in production"
            ),
        )
        return
    written = (
        isinstance(call, ast.Subscript)
        and isinstance(call.ctx, (ast.Store, ast.Del))
        or method in ("pop", "setdefault")
        or what in ("os.putenv", "os.unsetenv")
    )
    if key.value.upper().startswith(CONFIG_PREFIXES) and not JUDGE_WORDS.search(key.value):
        verb = "sets" if written else "reads"
        yield (
            line_of(node),
            (
                f"`{text}` {verb} the library setting `{key.value}`; keep the kernel's result "
                f"the same whatever its value."
            ),
            "warning",
        )
        return
    yield (
        line_of(node),
        (
            f"`{text}` {'sets' if written else 'reads'} the environment variable `{key.value}`, "
            f"which is no library setting: the audit's runner has an allow-listed environment "
            f"without it, a serving engine may have it (a provider key, a host name), so the "
            f"kernel can behave one way under audit and another in production"
        ),
    )


# -- BI012 -------------------------------------------------------------------------------------
REFLECT = {
    "getattr",
    "setattr",
    "delattr",
    "hasattr",
    "operator.attrgetter",
    "operator.methodcaller",
    "object.__getattribute__",
    "object.__setattr__",
    "builtins.getattr",
}


def _literal_strings(fn: ast.AST | None, name: str) -> bool:
    """Whether `name` is only ever bound to string literals in `fn` (`for n in ("weight", "bias")`)."""
    if fn is None:
        return False
    values = assignments(fn).get(name)
    if not values:
        return False
    for v in values:
        items = v.elts if isinstance(v, (ast.Tuple, ast.List, ast.Set)) else [v]
        if not all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
            return False
    return True


def _enclosing_function(m: Module, node: ast.AST) -> ast.AST | None:
    parent = m.parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        parent = m.parents.get(parent)
    return parent


@register(
    "BI012",
    "an attribute named by a computed string",
    "Name attributes and methods literally (x.size(0), x.shape[0]), never through getattr(x, name) with a "
    "computed name or operator.attrgetter: the static gate follows the batch size only through names it "
    "can read, and a hidden `size`/`shape` read escapes every check that depends on it.",
)
def computed_attributes(a: Analysis):
    m = module_of(a)
    if m is None:
        return
    for node, name in m.calls():
        leaf = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if name in REFLECT or leaf in ("__getattribute__", "__getattr__", "__setattr__"):
            at = (
                0
                if leaf in ("__getattribute__", "__getattr__", "__setattr__") or name.startswith("operator.")
                else 1
            )
            if name.startswith("object."):
                at = 1
            if len(node.args) <= at:
                continue
            attr = node.args[at]
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                continue
            if isinstance(attr, ast.Name) and _literal_strings(_enclosing_function(m, node), attr.id):
                continue
            target = (
                node.args[0]
                if at == 1
                else None
                if name.startswith("operator.")
                else node.func.value
                if isinstance(node.func, ast.Attribute)
                else None
            )
            on_module = (
                target is not None
                and m.qual(target).split(".")[0] in set(m.imports.values())
                and isinstance(target, (ast.Name, ast.Attribute))
                and base_name(target) is not None
                and base_name(target).id in m.imports
            )
            if on_module:
                yield (
                    node.lineno,
                    (
                        f"`{source_text(node)}` looks up an attribute of module `{m.qual(target)}` by a "
                        f"computed name (`{source_text(attr)}`); the static gate cannot tell which."
                    ),
                    "warning",
                )
            else:
                yield (
                    node.lineno,
                    (
                        f"`{source_text(node)}` reaches an attribute through a computed name "
                        f"(`{source_text(attr)}`): the static gate cannot follow what it reads (a "
                        f"hidden `size`/`shape` escapes every check of the batch size)"
                    ),
                )
        elif name in ("vars",) and node.args:
            yield (
                node.lineno,
                (
                    f"`{source_text(node)}` reads an object's attributes as a dict: the static gate "
                    f"cannot follow what it reads"
                ),
                "warning",
            )


# -- BI013 -------------------------------------------------------------------------------------
@register(
    "BI013",
    "code built or loaded at run time",
    "Write the kernel's code in the file: no eval, exec, compile, __import__, importlib.import_module with "
    "a computed name, pickle/marshal loads or types.FunctionType; the gates judge the source they read, "
    "and code made at run time can do what they never saw.",
)
def dynamic_code(a: Analysis):
    m = module_of(a)
    if m is None:
        return
    for node, name in m.calls():
        if isinstance(node.func, ast.Name) and node.func.id in m.defined:
            continue  # the file's own function of that name
        if name in CODE_CALLS:
            yield (
                node.lineno,
                (
                    f"`{source_text(node)}` runs or loads code built at run time (`{name}`): the gates "
                    f"judge the source they read, not what this makes"
                ),
            )
        elif name in ("importlib.import_module", "importlib.__import__"):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield (
                    node.lineno,
                    (f"`{source_text(node)}` imports `{arg.value}` by name; write `import {arg.value}` "
                     f"instead."),
                    "warning",
                )
            elif (names := _literal_arguments(m, arg)) is not None:
                yield (
                    node.lineno,
                    (f"`{source_text(node)}` imports a module named by its function's callers, each "
                     f"with a literal ({', '.join(f'`{n}`' for n in names[:4])}); write the imports "
                     f"instead."),
                    "warning",
                )
            else:
                yield (
                    node.lineno,
                    (
                        f"`{source_text(node)}` imports a module whose name is computed: the gates "
                        f"cannot tell which code runs"
                    ),
                )


def _literal_arguments(m, arg: ast.AST | None) -> list[str] | None:
    """The strings a function's parameter `arg` can be, when the function is the module's own and
    each of its calls in the module passes a string literal there (liger-kernel's
    `compare_version("torch", ...)` importing `package`); None when any caller passes something
    else, or none calls it (it may be called from anywhere)."""
    if not isinstance(arg, ast.Name):
        return None
    fn = m.parents.get(arg)
    while fn is not None and not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        fn = m.parents.get(fn)
    if fn is None or fn.name not in m.defined:
        return None
    params = [p.arg for p in fn.args.posonlyargs + fn.args.args]
    if arg.id not in params or any(isinstance(t, ast.Name) and t.id == arg.id for n in ast.walk(fn)
                                   if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                                   for t in (n.targets if isinstance(n, ast.Assign) else [n.target])):
        return None
    index, names = params.index(arg.id), []
    for call, _ in m.calls():
        if isinstance(call.func, ast.Name) and call.func.id == fn.name:
            given = next((k.value for k in call.keywords if k.arg == arg.id), None)
            if given is None and index < len(call.args):
                given = call.args[index]
            if not (isinstance(given, ast.Constant) and isinstance(given.value, str)):
                return None
            names.append(given.value)
        elif any(isinstance(n, ast.Name) and n.id == fn.name for n in ast.walk(call) if n is not call.func):
            return None  # the function passed on: called from elsewhere
    return sorted(set(names)) or None
