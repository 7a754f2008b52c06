"""What the tests read about a process in /proc (Linux): its children, state and parent."""

from __future__ import annotations

from pathlib import Path


def children(pid: int) -> list[int]:
    """Its child processes; none once it is gone."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def state(pid: int) -> str:
    """Its state letter (R, S, T, ...); "Z" once it is a zombie or gone."""
    try:
        return _stat(pid)[0]
    except (OSError, IndexError):
        return "Z"


def parent(pid: int) -> int:
    return int(_stat(pid)[1])
