"""A module's syntax tree as the rules for audit-aware code read it (`introspection`,
`hidden_state`): names resolved through imports, parents, the file's own definitions, and the
registration shared by BI008-BI013."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from gates.static.kernels import is_jit
from gates.static.rules import Analysis, rule


def register(rule_id: str, title: str, hint: str):
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
                for name in bound_names(t):
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

    def calls(self) -> Iterator[tuple[ast.Call, str]]:
        """Every call outside `@triton.jit` code, with the callee's qualified name."""
        for node in self.nodes():
            if isinstance(node, ast.Call):
                yield node, self.qual(node.func)

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


def line_of(node: ast.AST) -> int | None:
    return getattr(node, "lineno", None)


def source_text(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - an inlined helper's node without locations
        return "?"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_reference(m: Module, node: ast.AST) -> bool:
    """The outermost Name/Attribute of a dotted chain (so `sys._getframe` is seen once, not as `sys` too)."""
    parent = m.parents.get(node)
    return not (isinstance(parent, ast.Attribute) and parent.value is node)


def base_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def bound_names(target: ast.AST) -> list[str]:
    """Names an assignment target binds (`a`, `a, (b, *c)`), not those a subscript store reads."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in bound_names(e)]
    if isinstance(target, ast.Starred):
        return bound_names(target.value)
    return []


def assignments(fn: ast.AST) -> dict[str, list[ast.AST]]:
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for name in bound_names(t):
                    found.setdefault(name, []).append(node.value)
        elif isinstance(node, ast.For):
            for name in bound_names(node.target):
                found.setdefault(name, []).append(node.iter)
    return found
