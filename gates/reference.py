"""Loading a task's trusted modules — its plain-PyTorch reference and its production baselines —
and generating inputs with the reference."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from functools import cache
from types import ModuleType
from typing import Any

import torch

from gates.contract import Baseline, Task

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16,
          "int64": torch.int64, "int32": torch.int32, "int8": torch.int8, "bool": torch.bool}


@cache
def _load(path: str) -> ModuleType:
    """The module at `path`, registered in `sys.modules` under a name of its own: torch.compile
    imports a traced function's module by its name (dynamo's globals of an inlined call)."""
    name = f"agentloop_reference_{hashlib.sha256(path.encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def reference_module(task: Task) -> ModuleType:
    return _load(str(task.reference_path.resolve()))


def reference_fn(task: Task):
    return getattr(reference_module(task), task.entry)


def baseline_fn(task: Task, baseline: Baseline):
    """The function of a production baseline, uncompiled (the caller compiles `compile: true`
    ones): trusted code, loaded in the judge's process like the reference."""
    if baseline.source == "reference":
        return reference_fn(task)
    return getattr(_load(str(task.baselines_path.resolve())), baseline.name)


def make_inputs(task: Task, dims: dict[str, int], dtype: str, seed: int, device: str, *,
                on_device: bool = False) -> dict[str, Any]:
    """The entry's keyword arguments for one shape: tensors from the reference's generator,
    scalars from the task file.

    By default the random numbers are drawn on the CPU, so one seed gives the same inputs on
    every device. `on_device` draws them on the (GPU) device instead, with a generator of that
    device: other values, but hundreds of millions of elements in milliseconds rather than
    seconds (the correctness gate's many large shapes). A generator that cannot run there falls
    back to the CPU."""
    module = reference_module(task)
    if on_device and torch.device(device).type != "cpu":
        try:
            with torch.device(device):
                gen = torch.Generator(device=device).manual_seed(seed)
                return _with_scalars(task, module.make_inputs(dims, DTYPES[dtype], gen, device))
        except (RuntimeError, TypeError):
            pass  # this generator cannot draw on the device: the CPU below
    gen = torch.Generator().manual_seed(seed)
    return _with_scalars(task, module.make_inputs(dims, DTYPES[dtype], gen, device))


def _with_scalars(task: Task, tensors: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for arg in task.args:
        kwargs[arg.name] = arg.value if arg.kind == "scalar" else tensors[arg.name]
    return kwargs


def as_outputs(result: Any) -> tuple:
    """A candidate's or reference's return value as a tuple of outputs."""
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)
