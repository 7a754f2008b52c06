"""Batch contexts for the dynamic gate, and the batches built for them.

A context says which generated row sits at each position of one batch the candidate is called
on: probe rows at the first, middle and last positions; co-batched rows that are fresh random,
zeros, large in magnitude or (for ragged tasks such as decode_attention) longer sequences that
grow the padded length L; a permuted batch; a repeated call. `RowPools` generates the rows with
the reference's `make_inputs` and splices each context's batch out of them along the batch axis.

Besides the generated probes there is one near-tie probe: a probe row with a few elements set
to within two ulps of the row maximum along the last axis of each floating input, so that a
kernel whose comparisons (argmax keys, top-k) depend on the batch shows it. Generated inputs
hold exact ties at most, never values a few ulps apart.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from gates.contract import Arg, Task
from gates.reference import make_inputs

ContextKind = Literal["alone", "repeat", "padding", "batch", "zeros", "large", "long", "permuted"]
"""alone: a probe row by itself (the reference); repeat: a call repeated with identical inputs;
padding: a probe alone with extra padding along the padded axis; batch: probes among fresh
random rows; zeros / large / long: probes among rows of zeros, of large magnitude, or of longer
sequences; permuted: a batch with its rows reordered."""

PROBES = 3
"""Generated probe rows."""
NEAR_TIE = PROBES
"""Probe id of the near-tie probe, the last probe row."""
PROBE_ROWS = PROBES + 1
"""Probe rows, and probes in every batch of four rows or more (first, a quarter in, middle,
last): the near-tie probe sits in every such batch, since near-ties are what expose many
order-dependent reductions, and the rows rotate over the positions from one size to the next."""
NEAR_TIE_STEPS = (-2, -1, 0, 1, 2)
"""Ulps from the row maximum of the planted near-ties, lowest first."""
NOISE_ROWS = 8
"""Distinct rows of padding garbage for a ragged task, cycled over batch positions."""
LARGE_SCALE = 1000.0
CPU_BATCH_SIZES = (1, 2, 3, 4, 5, 8, 16, 17, 32, 33)
CUDA_BATCH_SIZES = (1, 2, 3, 4, 5, 8, 16, 31, 32, 63, 64, 127, 128, 255, 256, 511, 512)


class HarnessError(RuntimeError):
    """The gate's own machinery went wrong (never the candidate's fault)."""


def batch_sizes(task: Task, device: str) -> list[int]:
    """Batch sizes the dynamic gate calls the candidate with: the task's `bi` override, else
    a small set on CPU and, on GPU, sizes straddling library thresholds up to the task's largest
    batch plus the task's largest batch above 512."""
    override = task.bi.cpu_batch_sizes if device == "cpu" else task.bi.cuda_batch_sizes
    if override:
        return sorted(set(override) | {1})
    if device == "cpu":
        return list(CPU_BATCH_SIZES)
    task_sizes = {s[task.batch_axis] for s in task.shapes}
    largest = max(task_sizes)
    return sorted({b for b in CUDA_BATCH_SIZES if b <= largest} | {largest} | {1})


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
    return list(range(b)) if b < PROBE_ROWS else [0, b // 4, b // 2, b - 1]


def _probe_batch(kind: ContextKind, b: int, pool: str, rotation: int) -> Context:
    slots = [Slot(pool, i) for i in range(b)]
    # The probe rows (all of them from four rows up), rotating so each visits each position.
    positions = _probe_positions(b)
    ids = [(rotation + j) % PROBE_ROWS for j in range(len(positions))]
    probes = {}
    for pos, pid in zip(positions, ids, strict=True):
        slots[pos] = Slot("probe", pid)
        probes[pos] = pid
    return Context(kind, slots, probes)


def content_sizes(sizes: list[int], compact: bool = False) -> list[int]:
    """Batch sizes at which co-batched content varies: a small one with room for co-batched
    rows beside the three probes, and a middle one (`compact`: the next one up instead)."""
    roomy = [b for b in sizes if b > PROBE_ROWS]
    if not roomy:
        return [PROBE_ROWS + 1]
    small = next((b for b in roomy if b >= PROBE_ROWS + 2), roomy[0])
    larger = [b for b in roomy if b > small]
    other = (larger[0] if larger else small) if compact else roomy[len(roomy) // 2]
    return sorted({small, other})


def plan_contexts(sizes: list[int], *, ragged: bool, repeat_each_size: bool = False, repeats: int = 0,
                  permute_size: int | None = None, compact: bool = False, contents: int = 2,
                  permute: bool = True, extras: bool = True, seed: int = 0) -> list[Context]:
    """The ordered contexts of one dynamic-gate run; the first counterexample ends the run.

    Each probe alone, then (`extras`) probe 0 repeated and, if ragged, with extra padding; a
    batch of every size; zeros / large (/ long) co-batched content at the last `contents` of
    `content_sizes`; with `permute`, a permuted batch and `repeats` repeated calls of the
    largest batch of at most `permute_size` rows (default: the largest). `compact` picks
    smaller content sizes."""
    plan = [Context("alone", [Slot("probe", p)], {0: p}) for p in range(PROBE_ROWS)]
    if extras:
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
    content = content_sizes(sizes, compact)[-contents:] if contents > 0 else []
    for i, b in enumerate(content):
        for kind in ("zeros", "large", "long") if ragged else ("zeros", "large"):
            plan.append(_probe_batch(kind, b, kind, i + 1))
    if largest_at is not None and permute:
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


def padded_args(task: Task) -> dict[str, int]:
    """Batched tensor arguments with a padded axis, and that axis' index."""
    return {a.name: a.axes.index(a.padded_axis) for a in task.args
            if a.kind == "tensor" and a.batched and a.padded_axis}


def is_ragged(task: Task, device: str) -> bool:
    """Whether batches pad rows to the longest one along a padded axis (decode_attention's L)."""
    return bool(task.ragged and padded_args(task) and next(iter(task.ragged)) in task.dims_for(device, {}))


def pool_rows(plan: list[Context]) -> dict[str, int]:
    """Rows each pool needs for the plan (the probe pool always holds every probe row)."""
    rows = {"probe": PROBE_ROWS}
    for ctx in plan:
        for slot in ctx.slots:
            rows[slot.pool] = max(rows.get(slot.pool, 0), slot.row + 1)
    return rows


def plan_elements(task: Task, device: str, plan: list[Context]) -> int:
    """Elements `RowPools` generates for the plan, from the task's dims alone (no generation,
    so a GPU plan can be sized on any machine); padding garbage counted at its widest."""
    dims = task.dims_for(device, {})
    rows = pool_rows(plan)
    ragged = is_ragged(task, device)
    padded_axis = next(iter(task.ragged)) if ragged else None
    batched = [a for a in task.args if a.kind == "tensor" and a.batched]

    def row(arg: Arg, **over: int) -> int:
        return math.prod({**dims, **over}[axis] for axis in arg.axes[1:])

    total = 0
    for pool, n in rows.items():
        over = {padded_axis: 2 * dims[padded_axis]} if pool == "long" else {}
        total += n * sum(row(a, **over) for a in batched)
    if ragged:
        widest = 2 * dims[padded_axis] + 5
        total += NOISE_ROWS * sum(row(a, **{padded_axis: widest}) for a in batched if a.padded_axis)
    return total


def plant_near_ties(tensor: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A copy of `tensor` where, along its last axis, a few elements other than the maximum are
    set to the maximum and to one and two ulps below and above it (in the tensor's dtype),
    larger values at later positions so that merging them moves the argmax to an earlier one."""
    n = tensor.shape[-1]
    k = min(len(NEAR_TIE_STEPS), n - 1)
    # With little room, the most telling first: one ulp above the maximum, then an exact tie.
    steps = sorted(sorted(NEAR_TIE_STEPS, key=lambda s: (abs(s - 0.5), -s))[:k])
    flat = tensor.detach().cpu().reshape(-1, n).clone()
    top = flat.argmax(-1, keepdim=True)
    peak = flat.gather(1, top)
    ladder = {0: peak}
    for sign in (-1, 1):
        value, toward = peak, torch.full_like(peak, sign * float("inf"))
        for step in range(1, max(abs(s) for s in NEAR_TIE_STEPS) + 1):
            value = torch.nextafter(value, toward)
            ladder[sign * step] = value
    scores = torch.rand(flat.shape, generator=generator)
    scores.scatter_(1, top, 2.0)  # never the maximum's own position
    positions = scores.argsort(-1)[:, :k].sort(-1).values
    flat.scatter_(1, positions, torch.cat([ladder[s] for s in steps], 1))
    return flat.view(tensor.shape).to(tensor.device)


def near_tie_row(rows: dict[str, torch.Tensor], seed: int = 0) -> dict[str, torch.Tensor]:
    """The first of these batched rows with near-ties planted in every floating input that
    has a last axis of two or more (integer inputs, such as lengths or ids, unchanged)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, value in rows.items():
        row = value[:1]
        planted = row.is_floating_point() and row.dim() > 1 and row.shape[-1] > 1
        out[name] = plant_near_ties(row, gen) if planted else row.clone()
    return out


@dataclass
class Batch:
    """The entry's positional arguments for one context."""

    args: list[Any]
    extent: int | None = None
    """The padded axis' extent in this batch (ragged tasks)."""


class RowPools:
    """Generated rows, by pool name: "probe" (also the source of every unbatched input; the
    generated probes and the near-tie probe), "random", "zeros", "large" and, for ragged tasks,
    "long", each as many rows as the plan uses; for ragged tasks, padding garbage too."""

    _cache: OrderedDict[tuple, RowPools] = OrderedDict()
    CACHED = 4

    @classmethod
    def cached(cls, task: Task, device: str, dtype: str, plan: list[Context], seed: int = 0) -> RowPools:
        """The pools for these settings, generated once per worker: the reference's input
        generator can take seconds at GPU sizes, and batches are always spliced copies."""
        key = (task.model_dump_json(), str(task.reference_path), task.reference_path.stat().st_mtime_ns,
               device, dtype, tuple(sorted(pool_rows(plan).items())), seed)
        if key in cls._cache:
            cls._cache.move_to_end(key)
            return cls._cache[key]
        pools = cls(task, device, dtype, plan, seed)
        cls._cache[key] = pools
        while len(cls._cache) > cls.CACHED:
            cls._cache.popitem(last=False)
        return pools

    def __init__(self, task: Task, device: str, dtype: str, plan: list[Context], seed: int = 0) -> None:
        self.task, self.device, self.dtype = task, device, dtype
        self.dims = task.dims_for(device, {})
        axis = task.batch_axis
        rows = pool_rows(plan)
        self.padded = padded_args(task)
        self.length_arg = next(iter(task.ragged.values())) if task.ragged else None
        padded_axis = next(iter(task.ragged)) if task.ragged else None
        self.ragged = is_ragged(task, device)
        gen = lambda n, s, **over: make_inputs(task, {**self.dims, axis: n, **over}, dtype, s, device)
        self.unbatched = gen(PROBES, seed)
        probes = self._batched(self.unbatched)
        planted = near_tie_row(probes, seed)
        self.pools: dict[str, dict[str, torch.Tensor]] = {
            "probe": {k: torch.cat([v, planted[k]]) for k, v in probes.items()}}
        n_random = max(rows.get(p, 0) for p in ("random", "zeros", "large"))
        if n_random:
            random_rows = self._batched(gen(n_random, seed + 1))
            if "random" in rows:
                self.pools["random"] = {k: v[:rows["random"]] for k, v in random_rows.items()}
            # Zeros and large rows are the first random rows scaled: only as many as the plan uses.
            scaled = lambda n, factor: {k: v[:n] * factor if self._scaled(k, v) else v[:n]
                                        for k, v in random_rows.items()}
            for pool, factor in (("zeros", 0.0), ("large", LARGE_SCALE)):
                if pool in rows:
                    self.pools[pool] = scaled(rows[pool], factor)
        self.noise: dict[str, torch.Tensor] = {}
        if self.ragged:
            longer = 2 * self.dims[padded_axis]
            if "long" in rows:
                long_rows = self._batched(gen(rows["long"], seed + 2, **{padded_axis: longer}))
                # Every long row is valid up to the full extent, so the padded length surely grows.
                long_rows[self.length_arg] = torch.full_like(long_rows[self.length_arg], longer)
                self.pools["long"] = long_rows
            self.lengths = {name: pool[self.length_arg].tolist() for name, pool in self.pools.items()}
            # Padding garbage, generated once and reused by every batch: wide enough for the
            # long rows and for a probe alone with extra padding (twice its length plus five).
            longest = max(max(v) for v in self.lengths.values())
            extent = max(longer + 5, longest, 2 * max(self.lengths["probe"]) + 5)
            noise_gen = torch.Generator(device=device).manual_seed(seed + 3)
            for name, ax in self.padded.items():
                like = self.pools["probe"][name]
                shape = [NOISE_ROWS, *like.shape[1:]]
                shape[ax] = extent
                if like.is_floating_point():
                    self.noise[name] = torch.randn(shape, generator=noise_gen, device=device).to(like.dtype)
                else:
                    self.noise[name] = torch.zeros(shape, dtype=like.dtype, device=device)
        else:
            self.lengths = {}

    @property
    def generated_elements(self) -> int:
        """Elements of every generated tensor kept for the plan: pools and padding garbage."""
        tensors = [t for pool in self.pools.values() for t in pool.values()] + list(self.noise.values())
        return sum(t.numel() for t in tensors)

    def _batched(self, kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {a.name: kwargs[a.name] for a in self.task.args if a.kind == "tensor" and a.batched}

    def _scaled(self, name: str, tensor: torch.Tensor) -> bool:
        return tensor.is_floating_point() and name != self.length_arg

    def row_length(self, slot: Slot) -> int | None:
        return self.lengths[slot.pool][slot.row] if self.ragged else None

    def build(self, context: Context) -> Batch:
        """Splice the context's batch together along the batch axis; padding positions hold
        random garbage, so a kernel that reads them shows up as batch-variant."""
        extent = None
        if self.ragged:
            lengths = [self.row_length(s) for s in context.slots]
            extent = max(lengths) * 2 + 5 if context.extra_padding else max(lengths)
        args = []
        for arg in self.task.args:
            if arg.kind == "scalar":
                args.append(arg.value)
            elif not arg.batched:
                value = self.unbatched[arg.name]
                # A copy, so a candidate that writes to it cannot change later contexts.
                args.append(value.clone() if isinstance(value, torch.Tensor) else value)
            else:
                args.append(self._splice(arg.name, context.slots, extent))
        batch = Batch(args, extent)
        self._check_probes(context, batch)
        return batch

    def _splice(self, name: str, slots: list[Slot], extent: int | None) -> torch.Tensor:
        first = self.pools[slots[0].pool][name]
        shape = [len(slots), *first.shape[1:]]
        axis = self.padded.get(name) if self.ragged else None
        groups: dict[str, tuple[list[int], list[int]]] = {}
        for pos, slot in enumerate(slots):
            positions, rows = groups.setdefault(slot.pool, ([], []))
            positions.append(pos)
            rows.append(slot.row)
        if axis is None:
            out = torch.empty(shape, dtype=first.dtype, device=first.device)
            for pool, (positions, rows) in groups.items():
                out[self._index(positions)] = self.pools[pool][name][self._index(rows)]
            return out
        # Garbage row (position mod NOISE_ROWS) everywhere first, then each row's data.
        cycle = self._index([p % NOISE_ROWS for p in range(len(slots))])
        padding = self.noise[name].narrow(axis, 0, extent).index_select(0, cycle)
        out = padding.clone()
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
