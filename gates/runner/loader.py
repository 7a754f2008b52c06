"""Loading a candidate file in the runner, and the global torch state it must not change.

A candidate file is imported once per content version (path, mtime, size); the torch settings
its import changed are recorded and undone. Errors are described in one line that names the
innermost candidate-file line they passed through (the judge uses the same one-line form for
its own errors, so it imports `describe_exception` from here).

This module imports no torch at import time.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


class CandidateError(Exception):
    """A candidate file that cannot be loaded; the message is one line."""


def describe_exception(exc: BaseException) -> str:
    """One line for an exception: its type, its first and last message lines, and the
    innermost line of a candidate file it passed through."""
    described = getattr(exc, "described", None)
    if isinstance(described, str):  # already one line (the judge's account of a runner failure)
        return described
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    message = lines[0] if lines else ""
    if len(lines) > 1:
        message = f"{message} ... {lines[-1]}"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if len(text) > 400:
        text = text[:397] + "..."
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if os.path.realpath(frame.filename) in _candidate_files:
            where = f" (at {Path(frame.filename).name} line {frame.lineno}"
            # the innermost frame of a library: not the runner's own hook, not the standard library
            skip = (os.path.dirname(os.path.abspath(__file__)), sysconfig.get_paths()["stdlib"])
            inner = next(f for f in reversed(frames) if f is frame or not f.filename.startswith(skip))
            if inner is not frame and not inner.filename.startswith("<"):  # raised in a library
                where += f", raised in {'/'.join(Path(inner.filename).parts[-2:])} line {inner.lineno}"
            where += ")"
            break
    return text + where


# Candidate loading (inside the worker) -----------------------------------------------------
@dataclass
class LoadedCandidate:
    """A candidate module loaded in this process."""

    path: Path
    module: ModuleType
    state_changes: list[str]
    """Global torch settings that importing the candidate changed ("name: old -> new")."""


_candidate_files: set[str] = set()
_loaded: dict[tuple[str, int, int], LoadedCandidate] = {}


def load_candidate(path: str | Path) -> LoadedCandidate:
    """Import a candidate file once per content version; CandidateError if it does not import."""
    import importlib.util

    real = os.path.realpath(path)
    try:
        stat = os.stat(real)
    except OSError as exc:
        raise CandidateError(f"{path}: cannot read candidate ({exc.strerror})") from None
    key = (real, stat.st_mtime_ns, stat.st_size)
    if key in _loaded:
        return _loaded[key]
    name = f"agentloop_candidate_{abs(hash(key))}"
    spec = importlib.util.spec_from_file_location(name, real)
    module = importlib.util.module_from_spec(spec)
    _candidate_files.add(real)
    before = torch_global_state()
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - anything the candidate raises at import
        sys.modules.pop(name, None)
        raise CandidateError(f"candidate failed to import: {describe_exception(exc)}") from None
    after = torch_global_state()
    restore_torch_global_state(before)
    changes = [f"{k}: {before[k]!r} -> {after[k]!r}" for k in before if before[k] != after[k]]
    _loaded[key] = LoadedCandidate(Path(real), module, changes)
    return _loaded[key]


def candidate_entry(path: str | Path, entry: str) -> tuple[LoadedCandidate, Callable]:
    """The loaded candidate and its entry function; CandidateError if it has none."""
    loaded = load_candidate(path)
    fn = getattr(loaded.module, entry, None)
    if not callable(fn):
        raise CandidateError(f"{Path(path).name}: no entry function {entry!r}")
    return loaded, fn


# Global torch state: snapshot and restore (worker hygiene, anti-cheat) ---------------------
@functools.cache
def _torch_settings() -> dict[str, tuple[Callable[[], Any], Callable[[Any], None]]]:
    """Built once, on first use (in a runner, before any candidate loads): the getters and
    setters are torch's own even if a candidate replaces them later."""
    import torch

    def attr(obj: Any, name: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
        return (lambda: getattr(obj, name), lambda v: setattr(obj, name, v))

    matmul = torch.backends.cuda.matmul
    return {
        "torch default dtype": (torch.get_default_dtype, torch.set_default_dtype),
        "torch grad mode": (torch.is_grad_enabled, torch.set_grad_enabled),
        "torch deterministic algorithms": (torch.are_deterministic_algorithms_enabled,
                                           torch.use_deterministic_algorithms),
        "torch float32 matmul precision": (torch.get_float32_matmul_precision,
                                           torch.set_float32_matmul_precision),
        "torch.backends.cuda.matmul.allow_tf32": attr(matmul, "allow_tf32"),
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            attr(matmul, "allow_bf16_reduced_precision_reduction"),
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            attr(matmul, "allow_fp16_reduced_precision_reduction"),
        "torch.backends.cudnn.allow_tf32": attr(torch.backends.cudnn, "allow_tf32"),
        "torch.backends.cudnn.deterministic": attr(torch.backends.cudnn, "deterministic"),
        "torch.backends.cudnn.benchmark": attr(torch.backends.cudnn, "benchmark"),
        "torch num threads": (torch.get_num_threads, torch.set_num_threads),
        "the current CUDA stream": (_current_stream, torch.cuda.set_stream),
    }


def _current_stream() -> Any:
    import torch

    if not torch.cuda.is_initialized():  # on a CPU: no setting to read
        raise RuntimeError("CUDA is not initialised")
    return torch.cuda.current_stream()


def torch_global_state() -> dict[str, Any]:
    """Global torch settings a candidate must not change (SPEC.md §2)."""
    out = {}
    for name, (get, _) in _torch_settings().items():
        try:
            out[name] = get()
        except Exception:  # noqa: BLE001 - a setting this torch build lacks
            continue
    return out


def restore_torch_global_state(state: dict[str, Any]) -> None:
    settings = _torch_settings()
    for name, value in state.items():
        get, put = settings[name]
        try:
            if get() != value:
                put(value)
        except Exception:  # noqa: BLE001 - best effort
            continue

