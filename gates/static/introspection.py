"""Rules for code that can tell an audit from production: it inspects the call stack or the
process, reads the environment, keeps state across calls (counters, caches keyed on identity or
data), branches on addresses or the clock, hides attribute names from the reader, or runs code
it builds at run time (BI008-BI013).

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
import re
from collections.abc import Iterator

from gates.static.kernels import is_jit
from gates.static.rules import Analysis, rule


def _rule(rule_id: str, title: str, hint: str):
    """Registered like the batch rules; warnings carry their own reason, not `POSSIBLE`."""
    return rule(rule_id, title, hint, note="")


FRAME_CALLS = {
    "sys._getframe",
    "sys._getframemodulename",
    "sys._current_frames",
    "sys._current_exceptions",
    "sys.settrace",
    "sys.setprofile",
    "sys.gettrace",
    "sys.getprofile",
    "sys.call_tracing",
    "sys.exc_info",
    "sys.exception",
    "sys.last_traceback",
    "inspect.currentframe",
    "inspect.stack",
    "inspect.trace",
    "inspect.getouterframes",
    "inspect.getinnerframes",
    "inspect.getframeinfo",
    "inspect.getlineno",
    "inspect.getcallargs",
    "inspect.getmodule",
    "inspect.getfile",
    "inspect.getsourcefile",
    "traceback.extract_stack",
    "traceback.format_stack",
    "traceback.print_stack",
    "traceback.walk_stack",
    "traceback.walk_tb",
    "traceback.StackSummary",
    "traceback.FrameSummary",
    "threading.settrace",
    "threading.setprofile",
    "threading.current_thread",
    "threading.main_thread",
    "threading.enumerate",
    "threading.get_ident",
    "threading.get_native_id",
    "multiprocessing.current_process",
    "multiprocessing.parent_process",
    "os.getpid",
    "os.getppid",
    "os.getpgrp",
    "os.getsid",
    "os.getcwd",
    "os.getuid",
    "os.getlogin",
    "sys.argv",
    "sys.orig_argv",
    "__main__",
    "gc.get_referrers",
    "gc.get_objects",
    "faulthandler.dump_traceback",
}
"""What tells a function who called it or which program it runs in."""
FRAME_ATTRS = {
    "f_back",
    "f_code",
    "f_globals",
    "f_locals",
    "f_builtins",
    "f_lineno",
    "f_lasti",
    "f_trace",
    "tb_frame",
    "tb_next",
    "tb_lineno",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "co_filename",
    "co_name",
    "co_qualname",
    "co_firstlineno",
}
"""Attributes of frames, tracebacks, generators and code objects."""
TRACE_SAFE = {"traceback.format_exc", "traceback.print_exc", "traceback.format_exception"}
"""Formatting the exception being handled: for error messages, it tells nothing of the caller."""
JUDGE_WORDS = re.compile(
    r"gate|agentloop|judge|runner|audit|pytest|sandbox|driver|harness|candidate|bench", re.IGNORECASE
)

CONFIG_PREFIXES = (
    "TRITON_",
    "TORCH_",
    "PYTORCH_",
    "CUDA_",
    "CUBLAS",
    "CUDNN_",
    "NVIDIA_",
    "NCCL_",
    "HIP_",
    "ROCM_",
    "HSA_",
    "OMP_",
    "MKL_",
    "KMP_",
    "VLLM_",
    "SGLANG_",
    "FLASHINFER_",
    "XLA_",
    "LIGER_",
    "GEMS_",
    "FLA_",
    "TORCHINDUCTOR_",
    "TORCHDYNAMO_",
)
"""Environment variables that configure the libraries a kernel runs on (a warning)."""
ENV_READS = {
    "os.environ",
    "os.environb",
    "os.getenv",
    "os.getenvb",
    "posix.environ",
    "os.putenv",
    "os.unsetenv",
}
ENV_ENUMERATE = {"keys", "items", "values", "copy", "__iter__", "__len__", "__contains__"}

CLOCK_CALLS = {
    "time.time",
    "time.time_ns",
    "time.monotonic",
    "time.monotonic_ns",
    "time.perf_counter",
    "time.perf_counter_ns",
    "time.process_time",
    "time.process_time_ns",
    "time.localtime",
    "time.gmtime",
    "time.ctime",
    "time.strftime",
    "time.thread_time",
    "datetime.datetime.now",
    "datetime.datetime.today",
    "datetime.datetime.utcnow",
    "datetime.date.today",
    "datetime.now",
    "datetime.today",
    "datetime.utcnow",
    "date.today",
    "datetime.datetime.fromtimestamp",
}
"""Wall clocks and timers: a kernel's result has no reason to depend on when it runs."""

ADDRESS_CALLS = {
    "data_ptr",
    "storage_offset",
    "untyped_storage",
    "_cdata",
    "__array_interface__",
    "__cuda_array_interface__",
}
ADDRESS_BUILTINS = {"id", "ctypes.addressof", "ctypes.cast"}

CODE_CALLS = {
    "eval",
    "exec",
    "compile",
    "__import__",
    "builtins.eval",
    "builtins.exec",
    "builtins.compile",
    "builtins.__import__",
    "types.FunctionType",
    "types.CodeType",
    "types.LambdaType",
    "marshal.loads",
    "pickle.loads",
    "pickle.load",
    "dill.loads",
    "cloudpickle.loads",
    "runpy.run_path",
    "runpy.run_module",
    "code.InteractiveInterpreter",
    "code.interact",
    "importlib.reload",
    "importlib.util.spec_from_file_location",
    "importlib.util.module_from_spec",
    "importlib.machinery.SourceFileLoader",
}
"""Code made or loaded at run time: the static gate cannot read what it does."""

CONTAINERS = {
    "dict",
    "list",
    "set",
    "collections.defaultdict",
    "collections.OrderedDict",
    "collections.Counter",
    "collections.deque",
    "defaultdict",
    "OrderedDict",
    "Counter",
    "deque",
    "weakref.WeakValueDictionary",
    "weakref.WeakKeyDictionary",
    "array.array",
    "bytearray",
}
COUNTERS = {"itertools.count", "count", "itertools.cycle", "cycle"}
MUTATORS = {
    "append",
    "extend",
    "insert",
    "appendleft",
    "extendleft",
    "add",
    "update",
    "setdefault",
    "pop",
    "popleft",
    "popitem",
    "remove",
    "discard",
    "clear",
    "__setitem__",
    "rotate",
}
KEYED = {"setdefault", "add", "__setitem__"}
SHAPE_ATTRS = {"shape", "dtype", "device", "ndim", "is_cuda", "layout", "index", "type", "itemsize"}
SHAPE_CALLS = {"size", "stride", "dim", "numel", "is_contiguous", "element_size", "get_device", "nelement"}
DATA_CALLS = {
    "item",
    "tolist",
    "numpy",
    "tobytes",
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "norm",
    "hash",
    "__hash__",
    "cpu",
    "any",
    "all",
    "equal",
    "allclose",
    "count_nonzero",
}
"""Calls whose result depends on a tensor's values (or its identity), not its shape."""


def dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class Module:
    """The module's imports, top-level state and parent links, read once."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.imports: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.imports[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0]
                    )
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.imports[a.asname or a.name] = f"{node.module}.{a.name}"
        self.jit_bodies = {
            id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and is_jit(f) for n in ast.walk(f)
        }
        self.state: dict[str, str] = {}
        """Module-level name -> "container", "counter", "object" (def/class) or "value"."""
        self.defined: set[str] = set()
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.state[stmt.name] = "object"
                self.defined.add(stmt.name)
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
                else []
            )
            for t in targets:
                for name in _bound(t):
                    self.state[name] = self.kind(stmt.value)

    def qual(self, node: ast.AST) -> str:
        """`sys._getframe` for `sys._getframe`, `s._getframe` after `import sys as s`, `g` after
        `from sys import _getframe as g`, and `getattr(sys, "_getframe")`."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            base = self.qual(node.args[0])
            return f"{base}.{node.args[1].value}" if base else ""
        if isinstance(node, ast.Attribute):
            base = self.qual(node.value)
            return f"{base}.{node.attr}" if base else ""
        if isinstance(node, ast.Name):
            if node.id in self.imports:
                return self.imports[node.id]
            return node.id
        return ""

    def kind(self, value: ast.AST | None) -> str:
        if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
            return "container"
        if isinstance(value, ast.Call):
            name = self.qual(value.func)
            if name in CONTAINERS or name.split(".")[-1] in CONTAINERS:
                return "container"
            if name in COUNTERS:
                return "counter"
        return "value"

    def in_jit(self, node: ast.AST) -> bool:
        return id(node) in self.jit_bodies

    def nodes(self) -> Iterator[ast.AST]:
        for node in ast.walk(self.tree):
            if not self.in_jit(node):
                yield node

    def functions(self) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
        for node in self.nodes():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not is_jit(node):
                yield node


_MODULES: dict[int, Module] = {}


def module_of(a: Analysis) -> Module | None:
    if a.tree is None:
        return None
    key = id(a.tree)
    if key not in _MODULES or _MODULES[key].tree is not a.tree:
        _MODULES.clear()  # one analysis at a time: keep the last
        _MODULES[key] = Module(a.tree)
    return _MODULES[key]


def _line(node: ast.AST) -> int | None:
    return getattr(node, "lineno", None)


def _text(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - an inlined helper's node without locations
        return "?"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_reference(m: Module, node: ast.AST) -> bool:
    """The outermost Name/Attribute of a dotted chain (so `sys._getframe` is seen once, not as `sys` too)."""
    parent = m.parents.get(node)
    return not (isinstance(parent, ast.Attribute) and parent.value is node)


# -- BI008 -------------------------------------------------------------------------------------
@_rule(
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
                _line(node),
                (
                    f"`{_text(node)}` reads the attribute `{node.attr}` of a frame, traceback or "
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
            yield _line(node), "imports or names `__main__`: the kernel can tell which program runs it"
            continue
        if not isinstance(node, (ast.Name, ast.Attribute, ast.Call)) or not _is_reference(m, node):
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
                _line(node),
                (
                    f"`{_text(node)}` (`{name}`) looks at the call stack or the running process: "
                    f"the kernel can tell an audit's checking code from a serving engine"
                ),
            )
        elif name == "sys.modules" or name.startswith("sys.modules."):
            judged = _judge_literal(m, node)
            if judged:
                yield (
                    _line(node),
                    (
                        f"`{_text(m.parents.get(node, node))}` looks for `{judged}` among the loaded "
                        f"modules: the kernel can tell it is being judged"
                    ),
                )
            else:
                yield (
                    _line(node),
                    (
                        f"`{_text(node)}` reads which modules are loaded, which differs between "
                        f"an audit and a serving engine."
                    ),
                    "warning",
                )
        elif name.startswith(("inspect.", "traceback.")) and name.count(".") == 1:
            yield (
                _line(node),
                (
                    f"`{_text(node)}` uses `{name}`, a module for looking at live objects and "
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
@_rule(
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
        if not isinstance(node, (ast.Name, ast.Attribute)) or not _is_reference(m, node):
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
    text = _text(m.parents.get(node, node))
    if key is None:
        yield (
            _line(node),
            (
                f"`{text}` reads the whole environment (`{what}`): the audit's runner sees an "
                f"allow-listed environment, a serving engine its own (keys, host names), so "
                f"the kernel can behave differently in production"
            ),
        )
        return
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        yield (
            _line(node),
            (
                f"`{text}` reads an environment variable whose name is computed (`{_text(key)}`): "
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
            _line(node),
            (
                f"`{text}` {verb} the library setting `{key.value}`; keep the kernel's result "
                f"the same whatever its value."
            ),
            "warning",
        )
        return
    yield (
        _line(node),
        (
            f"`{text}` {'sets' if written else 'reads'} the environment variable `{key.value}`, "
            f"which is no library setting: the audit's runner has an allow-listed environment "
            f"without it, a serving engine may have it (a provider key, a host name), so the "
            f"kernel can behave one way under audit and another in production"
        ),
    )


# -- BI010 -------------------------------------------------------------------------------------
def _reads(node: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node)
    )


def _base_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


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


def _bound(target: ast.AST) -> list[str]:
    """Names an assignment target binds (`a`, `a, (b, *c)`), not those a subscript store reads."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _bound(e)]
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return []


def _assignments(fn: ast.AST) -> dict[str, list[ast.AST]]:
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for name in _bound(t):
                    found.setdefault(name, []).append(node.value)
        elif isinstance(node, ast.For):
            for name in _bound(node.target):
                found.setdefault(name, []).append(node.iter)
    return found


def _bad_key(m: Module, key: ast.AST, fn: ast.AST, tensors: set[str], depth: int = 0) -> str | None:
    """What makes a cache key more than shapes, dtypes and devices: an address, a tensor's identity or
    values, a counter, the clock or the environment; None for a key of shapes and constants."""
    assigned = _assignments(fn)
    for node in ast.walk(key):
        if isinstance(node, ast.Call):
            name = m.qual(node.func)
            leaf = node.func.attr if isinstance(node.func, ast.Attribute) else name
            if leaf in ADDRESS_CALLS or name in ADDRESS_BUILTINS:
                return f"an address (`{_text(node)}`)"
            if leaf in DATA_CALLS and not (
                isinstance(node.func, ast.Name) and leaf in ("sum", "max", "min", "any", "all")
            ):
                return f"a tensor's values (`{_text(node)}`)"
            if (
                name in ("hash", "next")
                or name in CLOCK_CALLS
                or name in ENV_READS
                or name.rsplit(".", 1)[0] in ENV_READS
            ):
                return f"`{_text(node)}`"
        elif isinstance(node, ast.Attribute) and node.attr in ADDRESS_CALLS:
            return f"an address (`{_text(node)}`)"
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            parent = m.parents.get(node)
            shaped = isinstance(parent, ast.Attribute) and (parent.attr in SHAPE_ATTRS | SHAPE_CALLS)
            if (
                node.id in tensors
                and not shaped
                and not (isinstance(parent, ast.Call) and parent.args and m.qual(parent.func) in ("len",))
            ):
                return f"the tensor `{node.id}` itself (its identity)"
            if m.state.get(node.id) in ("container", "counter") and not shaped:
                return f"module-level state `{node.id}`"
            if depth < 3 and node.id in assigned and not shaped:
                for value in assigned[node.id]:
                    why = _bad_key(m, value, fn, tensors, depth + 1)
                    if why:
                        return why
    return None


def _tensor_params(a: Analysis, fn: ast.AST) -> set[str]:
    """The entry's tensor parameters, by the task's contract (by position)."""
    if getattr(fn, "name", None) != a.task.entry:
        return set()
    params = [p.arg for p in fn.args.posonlyargs + fn.args.args]
    return {p for p, spec in zip(params, a.task.args, strict=False) if spec.kind == "tensor"}


@_rule(
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
                base = _base_name(target)
                if isinstance(target, ast.Name) and target.id in declared:
                    yield (
                        node.lineno,
                        (
                            f"`{_text(node)}` updates `{target.id}`, kept across calls "
                            f"(`global`/`nonlocal`): a call counter lets the kernel behave one way "
                            f"for the calls an audit makes and another after"
                        ),
                    )
                elif base is not None and base is not target and base.id in state | mutable:
                    yield (
                        node.lineno,
                        (
                            f"`{_text(node)}` updates module-level state `{base.id}` on every call: "
                            f"a counter lets the kernel behave one way for the calls an audit "
                            f"makes and another after"
                        ),
                    )
                elif base is not None and base is not target and base.id in elements:
                    yield (
                        node.lineno,
                        (
                            f"`{_text(node)}` updates an entry of module-level state on every "
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
                                f"`{_text(node)}` keys module-level `{name}` on {why}: state "
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
                            f"`{_text(node)}` grows module-level `{name}` on every call and its "
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
                        f"`{_text(node)}` draws from module-level counter `{node.args[0].id}`: "
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
                            f"`{_text(node)}` looks up module-level `{node.value.id}` by {why}: "
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
                            f"`{_text(node)}` tests membership in module-level state by {why}: "
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
                    f"`{_text(node)}` sets `{target.id}`, kept across calls, from its own value: a "
                    f"call counter or toggle lets the kernel behave one way for the calls an "
                    f"audit makes and another after"
                ),
            )
        elif not any(_reads(g.test, target.id) and any(n is node for n in ast.walk(g)) for g in guards):
            yield (
                node.lineno,
                (
                    f"`{_text(node)}` sets `{target.id}`, kept across calls, on every call: state a "
                    f"later call reads; initialise it once (`if {target.id} is None:`) from "
                    f"shapes and devices only."
                ),
                "warning",
            )
        return
    base = _base_name(target)
    if base is None or base is target or base.id not in state | mutable:
        return
    if isinstance(target, ast.Subscript) and target.value is base and base.id in mutable:
        why = _bad_key(m, target.slice, fn, tensors)
        if why:
            yield (
                node.lineno,
                (
                    f"`{_text(node)}` stores into module-level `{base.id}` keyed on {why}: state "
                    f"keyed on more than shapes, dtypes and devices tells apart calls a serving "
                    f"engine makes from those an audit makes"
                ),
            )
        elif _reads(node.value, base.id):
            yield (
                node.lineno,
                (
                    f"`{_text(node)}` updates module-level `{base.id}` from its own value on every "
                    f"call: a counter lets the kernel behave one way for the calls an audit "
                    f"makes and another after"
                ),
            )
        return
    if _reads(node.value, base.id):  # `rms_norm.calls = getattr(rms_norm, "calls", 0) + 1`
        yield (
            node.lineno,
            (
                f"`{_text(node)}` updates state kept on `{base.id}` from its own value on every "
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
            clocked |= {n for t in targets for n in _bound(t)}
    for node in m.nodes():
        if isinstance(node, ast.Compare) and _has_clock(m, node, clocked):
            yield (
                node.lineno,
                (
                    f"`{_text(node)}` compares the clock: the kernel can behave differently "
                    f"after a date or a time no audit waits for"
                ),
            )
        elif (
            isinstance(node, ast.Call) and m.qual(node.func) in CLOCK_CALLS and not _has_clock_parent(m, node)
        ):
            yield (
                node.lineno,
                (f"`{_text(node)}` reads the clock; a kernel's result must not depend on when it runs."),
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


@_rule(
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
                tainted |= {n for t in node.targets for n in _bound(t)}
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
                        f"`{_text(node)}` tests a tensor's alignment; a serving engine places "
                        f"tensors at other offsets than the audit, so both paths must compute the "
                        f"same bits (the dynamic gate varies the offsets)."
                    ),
                    "warning",
                )
            else:
                yield (
                    node.lineno,
                    (
                        f"`{_text(node)}` compares a tensor's address: the outcome differs "
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
                    f"`{_text(node)}` computes a value from a tensor's address: what it chooses "
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
    values = _assignments(fn).get(name)
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


@_rule(
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
    for node in m.nodes():
        if not isinstance(node, ast.Call):
            continue
        name = m.qual(node.func)
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
                and _base_name(target) is not None
                and _base_name(target).id in m.imports
            )
            if on_module:
                yield (
                    node.lineno,
                    (
                        f"`{_text(node)}` looks up an attribute of module `{m.qual(target)}` by a "
                        f"computed name (`{_text(attr)}`); the static gate cannot tell which."
                    ),
                    "warning",
                )
            else:
                yield (
                    node.lineno,
                    (
                        f"`{_text(node)}` reaches an attribute through a computed name "
                        f"(`{_text(attr)}`): the static gate cannot follow what it reads (a "
                        f"hidden `size`/`shape` escapes every check of the batch size)"
                    ),
                )
        elif name in ("vars",) and node.args:
            yield (
                node.lineno,
                (
                    f"`{_text(node)}` reads an object's attributes as a dict: the static gate "
                    f"cannot follow what it reads"
                ),
                "warning",
            )


# -- BI013 -------------------------------------------------------------------------------------
@_rule(
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
    for node in m.nodes():
        if not isinstance(node, ast.Call):
            continue
        name = m.qual(node.func)
        if isinstance(node.func, ast.Name) and node.func.id in m.defined:
            continue  # the file's own function of that name
        if name in CODE_CALLS:
            yield (
                node.lineno,
                (
                    f"`{_text(node)}` runs or loads code built at run time (`{name}`): the gates "
                    f"judge the source they read, not what this makes"
                ),
            )
        elif name in ("importlib.import_module", "importlib.__import__"):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield (
                    node.lineno,
                    (f"`{_text(node)}` imports `{arg.value}` by name; write `import {arg.value}` instead."),
                    "warning",
                )
            else:
                yield (
                    node.lineno,
                    (
                        f"`{_text(node)}` imports a module whose name is computed: the gates "
                        f"cannot tell which code runs"
                    ),
                )
