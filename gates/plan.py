"""The dynamic gate's plan: the batch sizes, dtypes and contexts a candidate is called in.

A context says which generated row sits at each position of one batch: probe rows (first, a
quarter in, middle, last); co-batched rows that are fresh random, zeros, large in magnitude or
(for ragged tasks such as decode_attention) longer sequences that grow the padded length L; a
permuted batch; a repeated call. Plans are sized per device: small on the interpreter, wide
around library thresholds on a GPU. `gates.batching.RowPools` builds the batches.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

from gates.contract import Arg, Task

ContextKind = Literal["alone", "single", "repeat", "padding", "batch", "zeros", "large", "nonfinite", "long",
                      "permuted", "beyond"]
"""alone: a probe row by itself (the reference); single: a co-batched random row by itself (the
reference for that row wherever it sits in a random batch); repeat: a call repeated with identical inputs;
padding: a probe alone with extra padding along the padded axis; batch: probes among fresh
random rows; zeros / large / nonfinite / long: probes among rows of zeros, of large magnitude,
holding inf, -inf and NaN, or of longer sequences; permuted: a batch with its rows reordered;
beyond: probes among fresh random rows in a batch larger than every swept size, its size drawn
per audit (`beyond_sizes`)."""

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
SINGLES = 16
"""Co-batched random rows also computed alone on a GPU, so that every random batch compares up to
this many more rows with the row alone. A library reduction that changes its strategy with the
batch size changes the rounding of only some rows (measured on an H200: torch's vector_norm kept
the bits of two random rows from B=1 to 8192 but changed a near-tie row's at B=8), so the more
distinct rows meet their batch-1 selves, the likelier the change shows."""
CPU_SINGLES = 4
"""The same in Triton's interpreter, where every call costs milliseconds per row."""
LARGE_SCALE = 1000.0
NONFINITE = (float("inf"), float("-inf"), float("nan"))
"""Planted at the start of every floating input of a "nonfinite" co-batched row: one request's
overflow or NaN must not reach its neighbours' rows (a tile-wide max or sum, `0 * inf` in a mask,
a batch-wide scale would let it)."""
CPU_BATCH_SIZES = (1, 2, 3, 4, 5, 8, 16, 17, 32, 33, 64, 128, 256, 512)
"""Small sizes, then the thresholds kernels switch at (64, 128, 256, 512): a kernel that changes
strategy at `T >= 64` or `T > 256` is crossed. In the interpreter a row costs about 1 ms (rms_norm)
to 10 ms (decode_attention, moe_topk_softmax), so these four batches add 1 to 10 s."""
CUDA_BATCH_SIZES = (1, 2, 3, 4, 5, 8, 16, 31, 32, 63, 64, 127, 128, 255, 256, 511, 512)


CPU_BEYOND = 256
"""On the CPU, batches beyond the sweep are drawn from (largest swept, largest + this]: in the
interpreter a row costs 1-10 ms, so one such batch adds 0.3-3 s."""
CUDA_BEYOND_DRAWS = 2
"""Batches drawn beyond the sweep on a GPU, up to twice the task's largest batch: one in each half."""


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


def beyond_sizes(task: Task, device: str, sweep_seed: int) -> list[int]:
    """Batch sizes above the largest swept one, drawn from `sweep_seed` (an audit passes a fresh
    one, so a candidate cannot know them in advance): a kernel that switches strategy only above
    every size the sweep tries (`if T > 8192:` hidden where the static gate cannot follow it) is
    called there too. GPU: one in each half of (largest, 2 x the task's largest batch]; CPU: one
    in (largest, largest + CPU_BEYOND]."""
    largest = max(batch_sizes(task, device))
    rng = random.Random(f"beyond:{task.name}:{device}:{sweep_seed}")
    if device == "cpu":
        return [rng.randint(largest + 1, largest + CPU_BEYOND)]
    top = 2 * max([largest] + [s[task.batch_axis] for s in task.shapes if task.batch_axis in s])
    edges = [largest + (top - largest) * k // CUDA_BEYOND_DRAWS for k in range(CUDA_BEYOND_DRAWS + 1)]
    return sorted({rng.randint(lo + 1, max(lo + 1, hi)) for lo, hi in zip(edges, edges[1:], strict=False)})


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
    drawn: tuple[int, int] | None = None
    """For a "beyond" batch: (the largest swept size, the seed its size was drawn from)."""

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
            "single": "the co-batched row alone (batch 1)",
            "padding": "the row alone with extra padding along the padded axis",
            "batch": f"a batch of {b} with fresh random co-batched rows; {at}",
            "zeros": f"a batch of {b} whose other rows are all zeros; {at}",
            "large": f"a batch of {b} whose other rows are {LARGE_SCALE:g} times larger; {at}",
            "nonfinite": f"a batch of {b} whose other rows hold inf, -inf and NaN (a request's overflow "
                         f"must not reach its neighbours: mask with neutral values, keep statistics per "
                         f"row); {at}",
            "long": f"a batch of {b} whose other sequences are longer, so the padded length grows; {at}",
            "permuted": f"the batch of {b} with its rows permuted; {at} (position "
                        f"{self.order[position] if self.order else '?'} before)",
            "beyond": f"a batch of {b} with fresh random co-batched rows, beyond the largest swept size "
                      f"{self.drawn[0] if self.drawn else '?'} (drawn for this audit, sweep seed "
                      f"{self.drawn[1] if self.drawn else '?'}): the kernel changes with the batch above "
                      f"the sizes the sweep tries; {at}",
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


CONTENT_KINDS: tuple[ContextKind, ...] = ("zeros", "large", "nonfinite")


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
                  permute: bool = True, extras: bool = True, singles: int = 0,
                  seed: int = 0) -> list[Context]:
    """The ordered contexts of one dynamic-gate run; the first counterexample ends the run.

    Each probe alone, the first `singles` random rows alone, then (`extras`) probe 0 repeated
    and, if ragged, with extra padding; a batch of every size; zeros / large (/ long) co-batched
    content at the last `contents` of `content_sizes`; with `permute`, a permuted batch and
    `repeats` repeated calls of the largest batch of at most `permute_size` rows (default: the
    largest). `compact` picks smaller content sizes. Content: zeros, large and non-finite
    co-batched rows (and longer sequences for a ragged task)."""
    plan = [Context("alone", [Slot("probe", p)], {0: p}) for p in range(PROBE_ROWS)]
    plan += [Context("single", [Slot("random", r)]) for r in range(singles)]
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
        for kind in CONTENT_KINDS + (("long",) if ragged else ()):
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


def add_beyond(plan: list[Context], sizes: list[int], largest: int, sweep_seed: int) -> list[Context]:
    """The plan with a probe batch of each size beyond the sweep appended (after every swept
    context, so the cheaper counterexamples come first). Its co-batched rows cycle over the
    random rows the plan already generates (a row may sit twice in the batch; each must still
    equal itself alone), so the pools and their memory do not grow with these sizes."""
    have = pool_rows(plan).get("random", 0)
    extra = []
    for i, b in enumerate(sizes):
        ctx = _probe_batch("beyond", b, "random", i)
        if have:
            ctx.slots = [s if s.pool == "probe" else Slot("random", s.row % have) for s in ctx.slots]
        ctx.drawn = (largest, sweep_seed)
        extra.append(ctx)
    return plan + extra


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
