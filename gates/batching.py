"""Batch contexts for the dynamic gate, and the batches built for them.

A context says which generated row sits at each position of one batch the candidate is called
on: probe rows at the first, middle and last positions; co-batched rows that are fresh random,
zeros, large in magnitude or (for ragged tasks such as decode_attention) longer sequences that
grow the padded length L; a permuted batch; a repeated call. `RowPools` generates the rows with
the reference's `make_inputs` and splices each context's batch out of them along the batch axis.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from gates.contract import Task
from gates.reference import make_inputs

ContextKind = Literal["alone", "repeat", "padding", "batch", "zeros", "large", "long", "permuted"]
"""alone: a probe row by itself (the reference); repeat: a call repeated with identical inputs;
padding: a probe alone with extra padding along the padded axis; batch: probes among fresh
random rows; zeros / large / long: probes among rows of zeros, of large magnitude, or of longer
sequences; permuted: a batch with its rows reordered."""

PROBES = 3
LARGE_SCALE = 1000.0
CPU_BATCH_SIZES = (1, 2, 3, 4, 5, 8, 16, 17, 32, 33)
CUDA_BATCH_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 16, 31, 32, 63, 64, 127, 128, 255, 256, 511, 512)


class HarnessError(RuntimeError):
    """The gate's own machinery went wrong (never the candidate's fault)."""


def batch_sizes(task: Task, device: str) -> list[int]:
    """Batch sizes the dynamic gate calls the candidate with: the task's `bi` override, else
    a small set on CPU and, on GPU, sizes straddling library thresholds up to the task's largest
    batch plus the task's own large batches."""
    override = task.bi.cpu_batch_sizes if device == "cpu" else task.bi.cuda_batch_sizes
    if override:
        return sorted(set(override) | {1})
    if device == "cpu":
        return list(CPU_BATCH_SIZES)
    task_sizes = {s[task.batch_axis] for s in task.shapes}
    largest = max(task_sizes)
    return sorted({b for b in CUDA_BATCH_SIZES if b <= largest} | {b for b in task_sizes if b > 512} | {1})


def gate_dtypes(task: Task, device: str) -> list[str]:
    """Dtypes the dynamic gate runs in: float32 first (bf16 outputs hide most one-ulp
    differences); on CPU only the first, to keep interpreter runs short."""
    if task.bi.dtypes:
        return list(task.bi.dtypes)
    ordered = sorted(task.dtypes, key=lambda d: d != "float32")
    return ordered[:1] if device == "cpu" else ordered


@dataclass(frozen=True)
class Slot:
    """One batch position: row `row` of pool `pool`."""

    pool: str
    row: int


@dataclass
class Context:
    """One batch to call the candidate on, and what its rows are compared with."""

    kind: ContextKind
    slots: list[Slot]
    probes: dict[int, int] = field(default_factory=dict)
    """Position -> probe id, for rows compared with that probe computed alone."""
    base: int | None = None
    """Index (in the plan) of a context this one is compared with row by row."""
    order: list[int] | None = None
    """For each position, the position of the same row in the base context."""
    extra_padding: bool = False

    @property
    def batch_size(self) -> int:
        return len(self.slots)

    def describe(self, position: int, base: Context | None = None) -> str:
        """How this batch was built, for a counterexample at `position`; starts with the kind."""
        b = self.batch_size
        where = "first" if position == 0 else "last" if position == b - 1 else "middle"
        at = f"the row at position {position} ({where})"
        text = {
            "alone": "the row alone (batch 1)",
            "padding": "the row alone with extra padding along the padded axis",
            "batch": f"a batch of {b} with fresh random co-batched rows; {at}",
            "zeros": f"a batch of {b} whose other rows are all zeros; {at}",
            "large": f"a batch of {b} whose other rows are {LARGE_SCALE:g} times larger; {at}",
            "long": f"a batch of {b} whose other sequences are longer, so the padded length grows; {at}",
            "permuted": f"the batch of {b} with its rows permuted; {at} (position "
                        f"{self.order[position] if self.order else '?'} before)",
        }.get(self.kind, "")
        if self.kind == "repeat":
            text = (f"the batch of {b} called again with identical inputs; {at}" if base and b > 1
                    else "the row alone called again with identical inputs")
        return f"{self.kind}: {text}"


def _probe_positions(b: int) -> list[int]:
    return [0] if b == 1 else [0, b - 1] if b == 2 else [0, b // 2, b - 1]


def _probe_batch(kind: ContextKind, b: int, pool: str, rotation: int) -> Context:
    slots = [Slot(pool, i) for i in range(b)]
    ids = [(rotation + j) % PROBES for j in range(PROBES)]
    probes = {}
    for pos, pid in zip(_probe_positions(b), ids, strict=False):
        slots[pos] = Slot("probe", pid)
        probes[pos] = pid
    return Context(kind, slots, probes)


def content_sizes(sizes: list[int], compact: bool = False) -> list[int]:
    """Batch sizes at which co-batched content varies: a small one with room for co-batched
    rows beside the three probes, and a middle one (`compact`: the next one up instead)."""
    roomy = [b for b in sizes if b > PROBES]
    if not roomy:
        return [PROBES + 1]
    small = next((b for b in roomy if b >= PROBES + 2), roomy[0])
    larger = [b for b in roomy if b > small]
    other = (larger[0] if larger else small) if compact else roomy[len(roomy) // 2]
    return sorted({small, other})


def plan_contexts(sizes: list[int], *, ragged: bool, repeat_each_size: bool, repeats: int,
                  permute_size: int | None = None, compact: bool = False, seed: int = 0) -> list[Context]:
    """The ordered contexts of one dynamic-gate run; the first counterexample ends the run.

    The permuted batch and the `repeats` repeated calls use the largest batch of at most
    `permute_size` rows (default: the largest); `compact` picks smaller content sizes."""
    plan = [Context("alone", [Slot("probe", p)], {0: p}) for p in range(PROBES)]
    plan.append(Context("repeat", [Slot("probe", 0)], {0: 0}))
    if ragged:
        plan.append(Context("padding", [Slot("probe", 0)], {0: 0}, extra_padding=True))
    largest_at = None
    for i, b in enumerate(b for b in sizes if b > 1):
        plan.append(_probe_batch("batch", b, "random", i))
        if permute_size is None or b <= permute_size or largest_at is None:
            largest_at = len(plan) - 1
        if repeat_each_size:
            plan.append(Context("repeat", plan[-1].slots, base=len(plan) - 1, order=list(range(b))))
    for i, b in enumerate(content_sizes(sizes, compact)):
        for kind in ("zeros", "large", "long") if ragged else ("zeros", "large"):
            plan.append(_probe_batch(kind, b, kind, i + 1))
    if largest_at is not None:
        base = plan[largest_at]
        b = base.batch_size
        order = list(range(b))
        rng = random.Random(seed)
        while order == list(range(b)):
            rng.shuffle(order)
        plan.append(Context("permuted", [base.slots[j] for j in order], base=largest_at, order=order))
        for _ in range(repeats):
            plan.append(Context("repeat", base.slots, base=largest_at, order=list(range(b))))
    return plan


@dataclass
class Batch:
    """The entry's positional arguments for one context."""

    args: list[Any]
    extent: int | None = None
    """The padded axis' extent in this batch (ragged tasks)."""


class RowPools:
    """Generated rows, by pool name: "probe" (also the source of every unbatched input),
    "random", "zeros", "large" and, for ragged tasks, "long"."""

    _cache: OrderedDict[tuple, RowPools] = OrderedDict()
    CACHED = 4

    @classmethod
    def cached(cls, task: Task, device: str, dtype: str, sizes: list[int], seed: int = 0) -> RowPools:
        """The pools for these settings, generated once per worker: the reference's input
        generator can take seconds at GPU sizes, and batches are always spliced copies."""
        key = (task.model_dump_json(), str(task.reference_path), task.reference_path.stat().st_mtime_ns,
               device, dtype, tuple(sizes), seed)
        if key in cls._cache:
            cls._cache.move_to_end(key)
            return cls._cache[key]
        pools = cls(task, device, dtype, sizes, seed)
        cls._cache[key] = pools
        while len(cls._cache) > cls.CACHED:
            cls._cache.popitem(last=False)
        return pools

    def __init__(self, task: Task, device: str, dtype: str, sizes: list[int], seed: int = 0) -> None:
        self.task, self.device, self.dtype = task, device, dtype
        self.dims = task.dims_for(device, {})
        axis = task.batch_axis
        self.padded = {a.name: a.axes.index(a.padded_axis) for a in task.args
                       if a.kind == "tensor" and a.batched and a.padded_axis}
        self.length_arg = next(iter(task.ragged.values())) if task.ragged else None
        padded_axis = next(iter(task.ragged)) if task.ragged else None
        self.ragged = bool(self.length_arg and self.padded and padded_axis in self.dims)
        gen = lambda n, s, **over: make_inputs(task, {**self.dims, axis: n, **over}, dtype, s, device)
        self.unbatched = gen(PROBES, seed)
        self.pools: dict[str, dict[str, torch.Tensor]] = {"probe": self._batched(self.unbatched)}
        random_rows = self._batched(gen(max(sizes + content_sizes(sizes)), seed + 1))
        self.pools["random"] = random_rows
        scaled = lambda factor: {k: v * factor if self._scaled(k, v) else v for k, v in random_rows.items()}
        self.pools["zeros"] = scaled(0.0)
        self.pools["large"] = scaled(LARGE_SCALE)
        if self.ragged:
            longer = 2 * self.dims[padded_axis]
            rows = self._batched(gen(max(content_sizes(sizes)), seed + 2, **{padded_axis: longer}))
            # Every long row is valid up to the full extent, so the padded length surely grows.
            rows[self.length_arg] = torch.full_like(rows[self.length_arg], longer)
            self.pools["long"] = rows
        self.lengths = {name: pool[self.length_arg].tolist() for name, pool in self.pools.items()} \
            if self.ragged else {}

    def _batched(self, kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {a.name: kwargs[a.name] for a in self.task.args if a.kind == "tensor" and a.batched}

    def _scaled(self, name: str, tensor: torch.Tensor) -> bool:
        return tensor.is_floating_point() and name != self.length_arg

    def row_length(self, slot: Slot) -> int | None:
        return self.lengths[slot.pool][slot.row] if self.ragged else None

    def build(self, context: Context, seed: int = 0) -> Batch:
        """Splice the context's batch together along the batch axis; padding positions get
        fresh random values, so a kernel that reads them shows up as batch-variant."""
        extent = None
        if self.ragged:
            lengths = [self.row_length(s) for s in context.slots]
            extent = max(lengths) * 2 + 5 if context.extra_padding else max(lengths)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        args = []
        for arg in self.task.args:
            if arg.kind == "scalar":
                args.append(arg.value)
            elif not arg.batched:
                value = self.unbatched[arg.name]
                # A copy, so a candidate that writes to it cannot change later contexts.
                args.append(value.clone() if isinstance(value, torch.Tensor) else value)
            else:
                args.append(self._splice(arg.name, context.slots, extent, gen))
        batch = Batch(args, extent)
        self._check_probes(context, batch)
        return batch

    def _splice(self, name: str, slots: list[Slot], extent: int | None, gen: torch.Generator) -> torch.Tensor:
        first = self.pools[slots[0].pool][name]
        shape = [len(slots), *first.shape[1:]]
        axis = self.padded.get(name) if self.ragged else None
        if axis is not None:
            shape[axis] = extent
        out = torch.empty(shape, dtype=first.dtype, device=first.device)
        groups: dict[str, tuple[list[int], list[int]]] = {}
        for pos, slot in enumerate(slots):
            positions, rows = groups.setdefault(slot.pool, ([], []))
            positions.append(pos)
            rows.append(slot.row)
        if axis is None:
            for pool, (positions, rows) in groups.items():
                out[self._index(positions)] = self.pools[pool][name][self._index(rows)]
            return out
        if first.is_floating_point():
            padding = torch.randn(shape, generator=gen, device=self.device).to(first.dtype)
        else:
            padding = torch.zeros(shape, dtype=first.dtype, device=self.device)
        out.copy_(padding)
        for pool, (positions, rows) in groups.items():
            src = self.pools[pool][name][self._index(rows)]
            m = min(src.shape[axis], extent)
            out.narrow(axis, 0, m)[self._index(positions)] = src.narrow(axis, 0, m)
        lengths = torch.tensor([self.row_length(s) for s in slots], device=self.device)
        steps = torch.arange(extent, device=self.device)
        steps = steps.view([1] * axis + [extent] + [1] * (len(shape) - axis - 1))
        valid = steps < lengths.view([-1] + [1] * (len(shape) - 1))
        return torch.where(valid, out, padding)

    def _index(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)

    def _check_probes(self, context: Context, batch: Batch) -> None:
        """Harness self-check: every probe position holds exactly its probe row's valid bytes."""
        names = [a.name for a in self.task.args]
        for pos, pid in context.probes.items():
            slot = Slot("probe", pid)
            for name, want in self.pools["probe"].items():
                got = batch.args[names.index(name)][pos]
                want = want[pid]
                axis = self.padded.get(name) if self.ragged else None
                if axis is not None:
                    n = self.row_length(slot)
                    got, want = got.narrow(axis - 1, 0, n), want.narrow(axis - 1, 0, n)
                if got.shape != want.shape or not torch.equal(as_bits(got), as_bits(want)):
                    raise HarnessError(f"batch splicing put wrong bytes in {name!r} at position {pos}")


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def as_bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements reinterpreted as integers of the same width, flattened: equal
    bits compare equal (NaN included) and +0.0 differs from -0.0."""
    flat = tensor.reshape(-1).contiguous()
    return flat.view(_INT_OF_SIZE.get(flat.element_size(), torch.uint8))
