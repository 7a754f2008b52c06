"""The static gate: contract-guided batch-invariance analysis of a candidate's source.

`static_gate(source, task)` parses the candidate (never runs it), reads the structure of its
`@triton.jit` kernels (kernels.py, kernel_reader.py, kernel_calls.py, kernel_aliases.py, configs.py),
follows the batch size of the task's batched inputs through the host code into launches, grids,
autotune keys and branches (taint.py, calls.py, expressions.py, control.py, tensors.py), and applies
the rules (rules.py), and the rules for code that can tell an audit from production
(introspection.py: the call stack, the environment, state across calls, addresses, computed
attribute names, code built at run time).
Names imported from small sibling modules of the file are analysed with their source inlined.
A file that does not parse, or lacks the entry function, gives a failed result with a BI000 error
finding and `error` set; an entry the analysis cannot follow, or a call on batched rows whose
callee has no source to read (an extension module, `torch._C`), gives a BI000 warning naming it.
The gate never raises on candidate input.
"""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

from gates.contract import Task
from gates.static import hidden_state, introspection
from gates.static.kernel_aliases import read_kernel_aliases
from gates.static.kernel_reader import read_kernel
from gates.static.kernels import KernelInfo, is_jit
from gates.static.rules import RULES, Analysis, run_rules
from gates.static.taint import read_host
from gates.verdict import Finding, GateResult

__all__ = ["RULES", "analyse", "hidden_state", "introspection", "static_gate"]
"""`introspection` (stack, environment, computed attribute names, code built at run time) and
`hidden_state` (state across calls, addresses) register BI008-BI013 in `RULES` beside the batch
rules."""


def _module_defs(tree: ast.Module) -> dict[str, ast.AST]:
    """Top-level names a constant evaluator may follow: functions, classes and assigned values."""
    defs: dict[str, ast.AST] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            defs[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Name):
            defs[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            defs[stmt.target.id] = stmt.value
    return defs


HELPER_BYTES = 200_000
"""Sibling modules larger than this are not inlined (a small helper module, not a library)."""
HELPERS_TOTAL = 600_000
"""At most this much helper source is inlined into one analysis (a package imports many)."""
HELPER_LINES = 1_000_000
"""An inlined helper's lines are numbered from `k * HELPER_LINES` (k its place among the files
inlined), so a finding in it names its own file and line, not a line of the file audited."""


def _helper_file(stmt: ast.ImportFrom, path: Path) -> Path | None:
    """The source file of the module `stmt` imports names from, when it is a sibling of `path`
    (`from helper import f`, `from .helper import f`, `from ..ops.helper import f`) or a module of
    the package `path` is in (`from mypkg.ops.helper import f` inside mypkg/); else None."""
    if not stmt.module:
        return None
    parts = stmt.module.split(".")
    if stmt.level:
        if stmt.level > len(path.parents) - 1:
            return None
        bases = [path.parents[stmt.level - 1]]
    else:  # beside the file, or from the root of the package the file belongs to
        bases = [path.parent] + [d.parent for d in path.parents
                                 if d.name == parts[0] and (d / "__init__.py").is_file()][:1]
    for base in bases:
        stem = base.joinpath(*parts)
        for source in (stem.with_suffix(".py"), stem / "__init__.py"):
            if source.is_file():
                return source
    return None


def with_helpers(tree: ast.Module, filename: str, depth: int = 0,
                 inlined: dict[Path, int] | None = None) -> ast.Module:
    """The module with the top-level code of the sibling modules it imports names from
    (`from .kernels import launch`, `from my_kernels import launch` beside the file, `from
    mypkg.kernels import launch` inside mypkg/) inlined in place of the import, so their kernels
    and host functions are analysed as if written here."""
    path = Path(filename)
    if depth > 2 or not path.is_file():  # only beside a real file
        return tree
    inlined = {path.resolve(): 0} if inlined is None else inlined  # file -> its size
    body: list[ast.stmt] = []
    for stmt in tree.body:
        source = _helper_file(stmt, path) if isinstance(stmt, ast.ImportFrom) else None
        size = source.stat().st_size if source is not None else 0
        if source is None or (source.resolve() not in inlined and (
                size > HELPER_BYTES or sum(inlined.values()) + size > HELPERS_TOTAL)):
            body.append(stmt)
            continue
        if source.resolve() not in inlined:  # a module imported twice is inlined once, as it runs once
            try:
                helper = ast.parse(source.read_text(), filename=str(source))
            except (SyntaxError, UnicodeDecodeError, OSError):
                body.append(stmt)
                continue
            ast.increment_lineno(helper, len(inlined) * HELPER_LINES)
            inlined[source.resolve()] = size
            body.extend(with_helpers(helper, str(source), depth + 1, inlined).body)
        for alias in stmt.names:  # `from helper import launch as _launch`
            if alias.asname and alias.asname != alias.name:
                body.append(ast.Assign(targets=[ast.Name(alias.asname, ast.Store())],
                                       value=ast.Name(alias.name, ast.Load()), lineno=stmt.lineno))
    return ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))


def _shown(path: Path, root: Path) -> str:
    """`path` as a reader finds it: relative to the directory above the audited file's package."""
    for base in [root.parent, *root.parents]:
        if not (base / "__init__.py").is_file():
            try:
                return str(path.relative_to(base))
            except ValueError:
                continue
    return str(path)


def in_helpers(findings: list[Finding], files: list[Path]) -> list[Finding]:
    """Findings whose lines are in inlined helpers (numbered from `HELPER_LINES`) renamed to the
    helper's file and line: `flag_gems/runtime/__init__.py line 10: ...`, with no line of the
    audited file."""
    if len(files) < 2:
        return findings

    def named(line: int) -> str:
        return f"{_shown(files[line // HELPER_LINES], files[0])} line {line % HELPER_LINES}"

    def inlined(line: int | None) -> bool:
        return line is not None and HELPER_LINES <= line < len(files) * HELPER_LINES

    def text(message: str) -> str:
        return re.sub(r"\bline (\d+)", lambda m: named(int(m[1])) if inlined(int(m[1])) else m[0], message)

    out = []
    for f in findings:
        message = text(f.message)
        if inlined(f.line):
            out.append(f.model_copy(update={"line": None, "message": f"{named(f.line)}: {message}"}))
        else:
            out.append(f.model_copy(update={"message": message}) if message != f.message else f)
    return out


def not_followed(analysis: Analysis) -> list[Finding]:
    """BI000 warnings for what the analysis could not follow: the entry itself, and calls on
    batched rows whose callee has no source to read. Never a silent pass."""
    host, entry = analysis.host, analysis.task.entry
    findings = []
    if not host.entry_followed:
        bound = f" (bound to `{host.entry_bound}`)" if host.entry_bound else ""
        findings.append(Finding(
            rule="BI000", severity="warning", line=None,
            message=f"`{entry}`{bound} is not a function the static gate can follow; only the kernels' "
                    f"atomics were checked",
            hint=f"Define `def {entry}(...)` in the file so its host code can be checked."))
    seen = set()
    for call in host.unfollowed:
        if (call.callee, call.bound) in seen:
            continue
        seen.add((call.callee, call.bound))
        bound = f", bound to `{call.bound}`," if call.bound and call.bound != call.callee else ""
        findings.append(Finding(
            rule="BI000", severity="warning", line=call.line,
            message=f"`{call.callee}`{bound} receives the rows of batched tensor `{call.tensor}` but "
                    f"has no Python source the static gate can read; what it does to them was not checked",
            hint="The static gate reads Python and Triton source only: audit the code behind the call "
                 "where its source is, or rely on the dynamic gate's bitwise check across batch sizes."))
    return findings


def analyse(tree: ast.Module, task: Task) -> Analysis:
    """Kernel structure and host facts of a parsed candidate."""
    defs = _module_defs(tree)
    consts = {name: node.value for name, node in defs.items() if isinstance(node, ast.Constant)}
    jit = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef) and is_jit(s)}
    kernels: dict[str, KernelInfo] = {name: read_kernel(fn, jit, consts, defs) for name, fn in jit.items()}
    kernels.update(read_kernel_aliases(tree, kernels, defs, jit, consts))
    return Analysis(task=task, kernels=kernels, host=read_host(tree, task, kernels), tree=tree)


def _unusable(message: str, line: int | None, hint: str, start: float) -> GateResult:
    finding = Finding(rule="BI000", severity="error", line=line, message=message, hint=hint)
    return GateResult(gate="static", passed=False, seconds=time.perf_counter() - start,
                      findings=[finding], error=message)


def static_gate(source: str, task: Task, filename: str = "candidate.py") -> GateResult:
    """Run the static gate on one candidate's source; passed means no error finding."""
    start = time.perf_counter()
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        return _unusable(f"{filename} line {exc.lineno}: syntax error ({exc.msg})", exc.lineno,
                         "Fix the syntax so the file parses as Python.", start)
    inlined: dict[Path, int] = {Path(filename).resolve(): 0}
    try:
        analysis = analyse(with_helpers(tree, filename, inlined=inlined), task)
    except RecursionError:
        return _unusable(f"{filename}: too deeply nested to analyse", None,
                         "Flatten the nesting of expressions and helper calls.", start)
    if not analysis.host.entry_found:
        return _unusable(f"{filename}: no function named {task.entry!r}", None,
                         f"Define `def {task.entry}(...)` with the parameters of the reference.", start)
    findings = in_helpers(not_followed(analysis) + run_rules(analysis), list(inlined))
    passed = not any(f.severity == "error" for f in findings)
    return GateResult(gate="static", passed=passed, seconds=time.perf_counter() - start, findings=findings)
