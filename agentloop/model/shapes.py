"""The shapes a model really called each op at, and the dynamic gate run on each op at them.

The task's own sweep checks its kernel at the task file's dims (`dims`, `cpu_dims`); a model
calls it at its own (hidden size, projection widths, vocabulary, KV length) and at the batch
sizes its schedule made. `ShapeLog` wraps a set's ops and records, per task and per distinct
non-batch dims, the batch sizes seen; `gate_at_model_shapes` then runs the dynamic gate on each
kernel with the task's dims replaced by the model's, so a user can tell a kernel that is
batch-variant at the model's sizes (a kernel bug) from a set whose kernels pass there and a
model that still diverges (a composition bug)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from agentloop.model.kernel_sets import KernelSet, channel, start_lanes
from gates.contract import Task, get_task

MAX_SHAPES = 6
"""Batch sizes per (task, dims) given to the gate: the smallest, the largest and some between."""


class OpShapes(BaseModel):
    """One op of the model at one set of non-batch dims."""

    task: str
    dims: dict[str, int]
    batch_sizes: list[int]


class ShapeLog:
    """Wraps ops; `shapes()` lists what each was called with."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, tuple], set[int]] = {}
        self._longest: dict[tuple[tuple, str], int] = {}
        self._lock = threading.Lock()  # the copies of a set's ops run in threads of their own

    def wrap(self, ops: KernelSet) -> KernelSet:
        return KernelSet({name: self._logged(get_task(name), fn) for name, fn in ops.items()}, ops.sources)

    def _logged(self, task: Task, fn: Callable) -> Callable:
        padded = set(task.ragged or {})

        def call(*args: Any) -> Any:
            result = fn(*args)
            note(args, result)
            return result

        def lanes(arg_lists: list[tuple]) -> Callable[[], list]:
            finish = start_lanes(fn, arg_lists)

            def noted() -> list:
                results = finish()
                done = set()  # calls of one request mostly share their shapes: each noted once
                for args, result in zip(arg_lists, results, strict=True):
                    outs = result if isinstance(result, (tuple, list)) else (result,)
                    shapes = tuple(tuple(v.shape) if hasattr(v, "shape") else v for v in (*args, *outs))
                    if shapes not in done:
                        done.add(shapes)
                        note(args, result)
                return results

            return noted

        def note(args: tuple, result: Any) -> None:
            dims: dict[str, int] = {}
            outs = result if isinstance(result, (tuple, list)) else (result,)
            for spec, value in [*zip(task.args, args, strict=False), *zip(task.outputs, outs, strict=False)]:
                if getattr(spec, "kind", "tensor") == "tensor" and hasattr(value, "shape"):
                    dims.update({axis: int(n) for axis, n in zip(spec.axes, value.shape, strict=False)})
            batch = dims.pop(task.batch_axis, 0)
            lengths = {axis: dims.pop(axis) for axis in padded if axis in dims}
            key = (task.name, tuple(sorted(dims.items())))
            with self._lock:
                self._seen.setdefault(key, set()).add(batch)
                for axis, n in lengths.items():  # a padded length: the gate sweeps it; keep the longest
                    self._longest[(key, axis)] = max(n, self._longest.get((key, axis), 0))

        call.start_lanes = lanes
        call.channel = channel(fn)
        return call

    def shapes(self) -> list[OpShapes]:
        out = []
        for (t, d), b in sorted(self._seen.items()):
            longest = {axis: n for (key, axis), n in self._longest.items() if key == (t, d)}
            out.append(OpShapes(task=t, dims={**dict(d), **longest}, batch_sizes=sorted(b)))
        return out


def _spread(sizes: list[int]) -> list[int]:
    if len(sizes) <= MAX_SHAPES:
        return sizes
    step = (len(sizes) - 1) / (MAX_SHAPES - 1)
    return sorted({sizes[round(i * step)] for i in range(MAX_SHAPES)})


def model_task(task: Task, op: OpShapes, device: str) -> Task:
    """The task with its dims and swept shapes replaced by the model's (both the GPU and the CPU
    keys, so the gate's device picks them either way)."""
    shapes = [{task.batch_axis: b, **op.dims} for b in _spread([b for b in op.batch_sizes if b > 0])]
    dims = {**task.dims, **op.dims}
    return task.model_copy(update={"dims": dims, "cpu_dims": dims, "shapes": shapes, "cpu_shapes": shapes})


class OpGate(BaseModel):
    """The dynamic gate's verdict on one op at the model's shapes."""

    task: str
    dims: dict[str, int]
    batch_sizes: list[int]
    passed: bool
    detail: str = ""


def gate_at_model_shapes(codes: Mapping[str, str], shapes: list[OpShapes], device: str,
                         timeout: float | None = None) -> list[OpGate]:
    """The dynamic gate on each kernel (`codes`: task -> source) at each of its model shapes, in a
    judge worker whose runner holds the kernel (never in this process)."""
    from gates.audit import DEFAULT_TIMEOUT
    from gates.judge.sandbox import Job, Sandbox

    out = []
    with Sandbox(device) as box:
        for op in shapes:
            if op.task not in codes:
                continue
            task = model_task(get_task(op.task), op, device)
            job = Job("gates.dynamic:dynamic_job", {"code": codes[op.task], "task": task, "device": device})
            outcome = box.run(job, timeout or DEFAULT_TIMEOUT[device])
            result = outcome.value if outcome.ok else None
            if result is None:
                out.append(OpGate(task=op.task, dims=op.dims, batch_sizes=op.batch_sizes, passed=False,
                                  detail=f"the gate did not finish: {outcome.error}"))
                continue
            detail, c = result.error or "", result.counterexample
            if c is not None:
                detail = (f"output {c.output} row {c.row} differs in a batch of {c.batch_size} (at "
                          f"{c.position}) from a batch of {c.reference_batch_size}; max abs diff "
                          f"{c.max_abs_diff}")
            elif result.findings:
                detail = "; ".join(f"{f.rule}: {f.message}" for f in result.findings
                                   if f.severity == "error")
            out.append(OpGate(task=op.task, dims=op.dims, batch_sizes=op.batch_sizes, passed=result.passed,
                              detail=detail[:300]))
    return out
