"""The batches of the dynamic gate's plan (`gates.plan`), built from generated rows.

`RowPools` generates the rows with the reference's `make_inputs` and splices each context's
batch out of them along the batch axis.

Besides the generated probes there is one near-tie probe: a probe row with a few elements set
to within two ulps of the row maximum along the last axis of each floating input, so that a
kernel whose comparisons (argmax keys, top-k) depend on the batch shows it. Generated inputs
hold exact ties at most, never values a few ulps apart.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

from gates.contract import Task
from gates.plan import (
    LARGE_SCALE,
    NEAR_TIE_STEPS,
    NOISE_ROWS,
    NONFINITE,
    PROBES,
    Context,
    HarnessError,
    Slot,
    is_ragged,
    padded_args,
    pool_rows,
)
from gates.reference import make_inputs


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


def with_nonfinite(rows: torch.Tensor) -> torch.Tensor:
    """A copy of these rows with inf, -inf and NaN as the first elements of every row."""
    out = rows.clone()
    flat = out.view(out.shape[0], -1)
    n = min(len(NONFINITE), flat.shape[1])
    flat[:, :n] = torch.tensor(NONFINITE[:n], dtype=out.dtype, device=out.device)
    return out


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
    generated probes and the near-tie probe), "random", "zeros", "large", "nonfinite" and, for
    ragged tasks, "long", each as many rows as the plan uses; for ragged tasks, padding garbage too."""

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
        n_random = max(rows.get(p, 0) for p in ("random", "zeros", "large", "nonfinite"))
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
            if "nonfinite" in rows:
                self.pools["nonfinite"] = {k: with_nonfinite(v[:rows["nonfinite"]]) if self._scaled(k, v)
                                           else v[:rows["nonfinite"]] for k, v in random_rows.items()}
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
