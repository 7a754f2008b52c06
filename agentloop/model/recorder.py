"""Recording each op call's output rows per request, and finding the first op that differed.

A record is keyed by (request, step) — the step is the request's own position, so the same key
names the same token in both schedules — and holds, in call order, each op site's output rows
for that request with the batch the row was in (size, row position, padded KV length). The
finder walks a request's steps in order and, within a step, its ops in execution order, and names
the first whose output differs bit for bit between the two schedules.

Memory: the check records every reported request during the first run of each schedule when the
estimate is small (the tiny CPU models), and otherwise only the requests whose tokens or logprobs
differed, on one more run (agentloop.model.check.RECORD_ALWAYS_BYTES); rows stay on the device
they were computed on.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cache

import torch
from pydantic import BaseModel, ConfigDict


class BatchContext(BaseModel):
    """Where a row was: the batch of the op call, and the schedule's step."""

    model_config = ConfigDict(frozen=True)
    batch_size: int
    """Rows of this op call (for an expert's projections: the tokens routed to it)."""
    row: int
    """The request's row in that call."""
    kv_len: int
    """The padded KV length of the step's batch."""
    global_step: int
    """The schedule's step counter."""


@dataclass
class Record:
    site: str
    task: str
    layer: int | None
    outputs: tuple[torch.Tensor, ...]
    """The request's row of each output."""
    context: BatchContext


class Divergence(BaseModel):
    """The first op whose output differed for a request between the two schedules."""

    model_config = ConfigDict(frozen=True)
    request: int
    step: int
    """The request's step (its token position: prompt tokens first, then generated ones)."""
    layer: int | None
    site: str
    task: str
    output: str = ""
    """The output's name in the task file."""
    index: list[int] = []
    """The first differing element of that output's row."""
    alone_value: float | int | None = None
    batched_value: float | int | None = None
    alone: BatchContext | None = None
    batched: BatchContext | None = None
    note: str = ""

    def describe(self) -> str:
        """One line."""
        where = f"step {self.step}, {self.site} ({self.task})"
        if self.note:
            return f"{where}: {self.note}"
        ctx = self.batched
        batch = f"batch of {ctx.batch_size}, row {ctx.row}, kv_len {ctx.kv_len}" if ctx else ""
        element = f"{self.output}[{', '.join(map(str, self.index))}]" if self.index else self.output
        return (f"{where}: {element} alone {self.alone_value!r} vs batched "
                f"{self.batched_value!r} ({batch})")


class Recorder:
    """Collects output rows of the requests in `requests` (None: every request)."""

    def __init__(self, requests: set[int] | None = None) -> None:
        self.requests = requests
        self.records: dict[tuple[int, int], list[Record]] = defaultdict(list)

    def record(self, site: str, task: str, layer: int | None, outputs: tuple[torch.Tensor, ...],
               owners: list[tuple[int, int]], kv_len: int, global_step: int) -> None:
        """`owners[i]` is the (request, step) of row i of the op's batched outputs; `kv_len` and
        `global_step` are the schedule step's."""
        for row, (request, step) in enumerate(owners):
            if self.requests is not None and request not in self.requests:
                continue
            ctx = BatchContext(batch_size=len(owners), row=row, kv_len=kv_len, global_step=global_step)
            rows = tuple(out[row].detach().clone() for out in outputs)
            self.records[(request, step)].append(Record(site, task, layer, rows, ctx))


@cache
def _output_names(task: str) -> tuple[str, ...]:
    from gates.contract import TaskError, get_task

    try:
        return tuple(o.name for o in get_task(task).outputs)
    except TaskError:
        return ()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor as integers of its bit pattern (NaNs and signed zeros compare by bits)."""
    if t.is_floating_point():
        return t.reshape(-1).view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t.reshape(-1)


def _first_difference(a: torch.Tensor, b: torch.Tensor) -> list[int] | None:
    """The index of the first element whose bits differ; [] for a shape or dtype mismatch."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return []
    differ = (_bits(a) != _bits(b)).nonzero()
    if not len(differ):
        return None
    flat = int(differ[0])
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)] if a.dim() else []


def first_divergence(alone: Recorder, batched: Recorder, request: int) -> Divergence | None:
    """The earliest step, then the earliest op of that step, whose output rows for `request`
    differ; None if every recorded op agrees (the difference came from elsewhere)."""
    steps = sorted({s for r, s in (*alone.records, *batched.records) if r == request})
    for step in steps:
        a_recs, b_recs = alone.records.get((request, step), []), batched.records.get((request, step), [])
        for a, b in zip(a_recs, b_recs, strict=False):  # a longer list: after the loop
            if (a.site, a.task) != (b.site, b.task):
                return Divergence(request=request, step=step, layer=a.layer, site=a.site, task=a.task,
                                  alone=a.context, batched=b.context,
                                  note=f"the batched schedule ran {b.site} ({b.task}) here instead")
            for k, (x, y) in enumerate(zip(a.outputs, b.outputs, strict=True)):
                index = _first_difference(x, y)
                if index is None:
                    continue
                names = _output_names(a.task)
                name = names[k] if k < len(names) else f"out[{k}]"
                if x.shape != y.shape or x.dtype != y.dtype:
                    return Divergence(request=request, step=step, layer=a.layer, site=a.site,
                                      task=a.task, output=name, alone=a.context, batched=b.context,
                                      note=f"{name} is {list(x.shape)} {x.dtype} alone, "
                                           f"{list(y.shape)} {y.dtype} batched")
                return Divergence(request=request, step=step, layer=a.layer, site=a.site, task=a.task,
                                  output=name, index=index, alone_value=x[tuple(index)].item(),
                                  batched_value=y[tuple(index)].item(), alone=a.context,
                                  batched=b.context)
        if len(a_recs) != len(b_recs):
            longer, which = (a_recs, "alone") if len(a_recs) > len(b_recs) else (b_recs, "batched")
            extra = longer[min(len(a_recs), len(b_recs))]
            return Divergence(request=request, step=step, layer=extra.layer, site=extra.site,
                              task=extra.task, note=f"only the {which} schedule ran this op here")
    return None
