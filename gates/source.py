"""A candidate's source as the gates read it: the file checked for the task's entry, and the static
gate's result on it (shared by the audit of a file and of a library entry)."""

from __future__ import annotations

import ast
import time
from pathlib import Path

from gates.candidate import CandidateError
from gates.contract import Task
from gates.verdict import Finding, GateResult


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def read_candidate(candidate: Path, task: Task) -> str:
    """The candidate's source; CandidateError (one line) when the file is missing, does not
    parse, or does not define the task's entry function."""
    if not candidate.is_file():
        raise CandidateError(f"{candidate}: candidate file not found")
    try:
        source = candidate.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CandidateError(f"{candidate}: cannot read candidate ({exc})") from None
    try:
        tree = ast.parse(source, filename=str(candidate))
    except SyntaxError as exc:
        raise CandidateError(f"{candidate}: line {exc.lineno}: syntax error: {exc.msg}") from None
    if not _defines(tree, task.entry):
        raise CandidateError(f"{candidate}: no entry function {task.entry!r} "
                             f"(task {task.name} calls {task.entry}(...))")
    return source


def static_result(source: str, task: Task, candidate: Path) -> GateResult:
    """The static gate's result, or a warning when it is not installed."""
    start = time.perf_counter()
    try:
        from gates.static import static_gate
    except ModuleNotFoundError as exc:
        if exc.name != "gates.static":
            raise
        return GateResult(gate="static", passed=True, findings=[Finding(
            rule="GATE", severity="warning", message="the static gate is not installed; not run")])
    try:
        return static_gate(source, task, filename=str(candidate))
    except Exception as exc:  # noqa: BLE001 - a bug in the static gate must not pass silently
        return GateResult(gate="static", passed=False, seconds=time.perf_counter() - start,
                          error=f"static gate failed: {type(exc).__name__}: {exc}")
