"""Auditing an installed library's callable in place (`agentloop audit --entry pkg.module:function`).

The callable is untrusted code like a candidate: it only ever runs in a caged runner. What the
runner loads is a small candidate module made here — `from pkg.module import function as <entry>`,
or the user's adapter file, which defines the task's entry on top of the library (argument order,
extra parameters, output tuples). The library must be importable from the judge's import path
(`PYTHONPATH`), which the runner's cage keeps visible.

The static gate reads the module's source file (found on the import path without importing it,
so no library code runs here) followed by the task's entry: a one-line call of the callable, or
the adapter with its imports from that module turned into plain names. Line numbers of findings
are those of the module's file; a finding in the adapter names the adapter's line. A torch
function (`torch.nn.functional:linear`) is the exception: the static gate knows torch's ops by
name, so it reads the entry as a file calling that op (a GEMM gets the BI005 of `F.linear(x, ...)`
in a file), not torch's own source.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gates.contract import Task
from gates.runner.loader import CandidateError
from gates.source import read_candidate
from gates.source import static_result as source_static_result
from gates.static.ops import is_torch_function
from gates.verdict import GateResult

SPEC = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<attr>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")
IMPORT_FAILED = "candidate failed to import"
"""How the runner's loader starts the error of a candidate module that does not import."""


@dataclass(frozen=True)
class LibraryEntry:
    """An importable callable audited as a task's entry, and what each gate gets for it."""

    spec: str
    """"pkg.module:function" (the function may be dotted: "pkg.module:Function.apply")."""
    module: str
    attr: str
    module_file: Path | None
    """The module's Python source, or None when it has none (an extension module)."""
    adapter: Path | None
    code: str
    """The candidate module the runner loads: the adapter's source or a one-line import."""
    static_source: str | None
    """The module's source followed by the entry (None without a module source)."""
    adapter_offset: int = 0
    """Lines of `static_source` before the adapter's first line."""
    by_name: bool = False
    """A torch function, which the static gate models by name: it reads `code` (the one-line
    import, or the adapter) as it reads a file calling that function, not torch's source."""

    def __str__(self) -> str:
        return self.spec if self.adapter is None else f"{self.spec} (adapter {self.adapter})"


def parse_spec(spec: str) -> tuple[str, str]:
    """(module, attribute) of "pkg.module:function"; CandidateError for anything else."""
    match = SPEC.match(spec.strip())
    if not match:
        raise CandidateError(f"--entry {spec!r}: expected package.module:function "
                             f"(e.g. liger_kernel.ops.rms_norm:LigerRMSNormFunction.apply)")
    return match["module"], match["attr"]


def find_module(module: str, search: Sequence[str] | None = None) -> tuple[Path | None, bool]:
    """(the module's source file or None, whether the module exists at all) on the import path,
    found by looking at files only: nothing is imported, so no library code runs here."""
    parts = module.split(".")
    for base in (sys.path if search is None else search):
        root = Path(base or ".")
        if not root.is_dir():
            continue
        stem = root.joinpath(*parts)
        for source in (stem.with_suffix(".py"), stem / "__init__.py"):
            if source.is_file():
                return source.resolve(), True
        if stem.is_dir() or (stem.parent.is_dir() and any(stem.parent.glob(f"{parts[-1]}.*.so"))):
            return None, True  # a namespace package or an extension module: no source to read
    return None, False


def _top_level_names(tree: ast.Module) -> set[str] | None:
    """Names the module defines at top level; None when it may define others at run time
    (`from x import *`, a module `__getattr__`)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            inner = _top_level_names(ast.Module(body=list(_bodies(node)), type_ignores=[]))
            if inner is None:
                return None
            names |= inner
    return None if "__getattr__" in names else names


def _bodies(node: ast.stmt) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for field in ("body", "orelse", "finalbody"):
        out += getattr(node, field, [])
    for handler in getattr(node, "handlers", []):
        out += handler.body
    return out


def _entry_call(task: Task, attr: str) -> str:
    """The task's entry as a one-line call of `attr` with the task's parameters."""
    params = ", ".join(a.name for a in task.args)
    head = attr.split(".")[0]
    lines = ["", "", f"# agentloop audit --entry: the task's entry `{task.entry}` calls `{attr}`."]
    callee = attr
    if head == task.entry:  # the module's own function of that name: keep it under another name
        lines.append(f"_audited_{head} = {head}")
        callee = f"_audited_{attr}"
    lines += [f"def {task.entry}({params}):", f"    return {callee}({params})", ""]
    return "\n".join(lines)


def _adapter_for_static(adapter_source: str, module: str) -> tuple[str, bool]:
    """The adapter's source with `from <module> import a as b` turned into `b = a` (the module's
    source comes before it) and `from __future__` imports blanked, line numbers kept; and
    whether it imported anything from the module."""
    tree = ast.parse(adapter_source)
    lines = adapter_source.splitlines()
    imported = False
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        if node.module == "__future__":
            replacement = "pass"
        elif node.module == module:
            imported = True
            renames = [f"{a.asname} = {a.name}" for a in node.names if a.asname and a.asname != a.name]
            replacement = "; ".join(renames) or "pass"
        else:
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        indent = lines[first][:len(lines[first]) - len(lines[first].lstrip())]
        lines[first] = indent + replacement
        for i in range(first + 1, last + 1):
            lines[i] = ""
    return "\n".join(lines) + "\n", imported


def resolve_entry(spec: str, task: Task, adapter: str | Path | None = None,
                  search: Sequence[str] | None = None) -> LibraryEntry:
    """The library callable `spec` as the task's entry; CandidateError (one line) when the spec
    is malformed, the module is not on the import path, it has no such attribute, or the
    adapter cannot be used."""
    module, attr = parse_spec(spec)
    module_file, exists = find_module(module, search)
    if not exists:
        raise CandidateError(f"--entry {spec}: no module named {module!r} on the import path "
                             f"(install the library, or add its directory to PYTHONPATH)")
    module_source = None
    if module_file is not None:
        try:
            module_source = module_file.read_text()
            names = _top_level_names(ast.parse(module_source, filename=str(module_file)))
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            raise CandidateError(f"--entry {spec}: cannot read {module_file} ({exc})") from None
        if names is not None and attr.split(".")[0] not in names:
            raise CandidateError(f"--entry {spec}: module {module!r} ({module_file}) has no attribute "
                                 f"{attr.split('.')[0]!r}")
    by_name = is_torch_function(f"{module}.{attr}")
    if adapter is None:
        head, _, rest = attr.partition(".")
        code = (f'"""agentloop audit --entry {spec}: the library\'s callable as `{task.entry}`."""\n'
                + (f"from {module} import {head} as {task.entry}\n" if not rest else
                   f"from {module} import {head} as _audited\n{task.entry} = _audited.{rest}\n"))
        static = code if by_name else None if module_source is None else \
            module_source.rstrip("\n") + "\n" + _entry_call(task, attr)
        return LibraryEntry(spec, module, attr, module_file, None, code, static, by_name=by_name)
    adapter = Path(adapter)
    code = read_candidate(adapter, task)
    adapted, imported = _adapter_for_static(code, module)
    if not imported:
        raise CandidateError(f"{adapter}: the adapter does not import from {module!r} "
                             f"(`from {module} import {attr.split('.')[0]}`), the module --entry names")
    if by_name:
        return LibraryEntry(spec, module, attr, module_file, adapter, code, code, by_name=True)
    if module_source is None:
        return LibraryEntry(spec, module, attr, module_file, adapter, code, None)
    head = module_source.rstrip("\n") + f"\n\n\n# agentloop audit --entry: the adapter {adapter.name}\n"
    return LibraryEntry(spec, module, attr, module_file, adapter, code, head + adapted,
                        adapter_offset=head.count("\n"))


def static_result(entry: LibraryEntry, task: Task) -> GateResult:
    """The static gate on the module's source and the entry; findings on the adapter's lines
    are renamed to them."""
    if entry.static_source is None:
        from gates.verdict import Finding

        return GateResult(gate="static", passed=True, findings=[Finding(
            rule="BI000", severity="warning",
            message=f"{entry.module} has no Python source to analyse (an extension module); not checked")])
    if entry.by_name:  # the made module's lines mean nothing to the user; the adapter's do
        result = source_static_result(entry.static_source, task, entry.adapter or Path(f"<{entry.spec}>"))
        if entry.adapter is None:
            return result.model_copy(update={"findings": [f.model_copy(update={"line": None})
                                                          for f in result.findings]})
    else:
        result = source_static_result(entry.static_source, task, entry.module_file)
        if entry.adapter is None or not entry.adapter_offset:
            return _library_code(result, lambda f: True)
    offset, name = entry.adapter_offset, entry.adapter.name
    result = _library_code(result, lambda f: f.line is None or f.line <= offset)

    def lines_in_adapter(text: str) -> str:  # "(line 1444)" in a message -> "(adapter x.py line 6)"
        return re.sub(r"(?<!\.py )\bline (\d+)", lambda m: f"adapter {name} line {int(m[1]) - offset}"
                      if int(m[1]) > offset else m[0], text)

    findings = []
    for f in result.findings:
        update = {"message": lines_in_adapter(f.message)}
        if f.line is not None and f.line > offset:
            update = {"line": None, "message": f"adapter {name} line {f.line - offset}: {update['message']}"}
        findings.append(f.model_copy(update=update))
    return result.model_copy(update={"findings": findings})


EVASION_RULES = {"BI008", "BI009", "BI010", "BI011", "BI012", "BI013"}
"""The rules for code that can tell an audit from production (`gates.static.introspection`,
`gates.static.hidden_state`)."""
IN_LIBRARY = (" [a warning in a library audited in place: a library is not written against this audit, "
              "and its registries, feature detection and settings use the same mechanisms]")


def _library_code(result: GateResult, in_library) -> GateResult:
    """The static result with the audit-evasion rules' errors in the library's own code (not in
    the adapter: `in_library` tells them apart by line) made warnings. An agent writes a candidate to
    pass the gates, so there they are errors; a library's `os.environ.get("FLAGGEMS_CACHE_DIR")`,
    `getattr(module, op_name)` dispatch or vendor `importlib.import_module(f"_{vendor}.ops")`
    predates the audit. Its batch rules (BI001-BI007) keep their severity."""
    findings = [f.model_copy(update={"severity": "warning", "message": f.message + IN_LIBRARY})
                if f.severity == "error" and f.rule in EVASION_RULES and in_library(f) else f
                for f in result.findings]
    passed = result.error is None and not any(f.severity == "error" for f in findings)
    return result.model_copy(update={"findings": findings, "passed": passed})
