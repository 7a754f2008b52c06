"""Measure every corpus candidate: correctness, bitwise batch invariance and determinism.

This is the corpus's answer book, written independently of the dynamic gate (which is later
checked against these labels). Each candidate runs in its own child process, so a hang, a crash
or a compile error becomes the label `broken` with a one-line detail instead of stopping the run.

    python bench/measure_corpus.py --device cuda|cpu [--tasks a,b] [--jobs N] [--write]
                                   [--timeout S] [--json OUT]

Per candidate, in the child:
  (a) correctness against the reference over the task's shapes and dtypes (task tolerances);
  (c) determinism: the same call repeated gives identical bytes, at a few batch sizes;
  (b) batch invariance: a probe row computed alone (batch size 1) must come back bit for bit in
      every batch of a sweep of sizes, at the first / middle / last position, beside fresh random,
      zero and large rows, rows holding inf, -inf and NaN (which must not reach a probe), beside
      longer or tighter sequences for a ragged padded axis; a permuted batch must permute its
      outputs; rows shared by two batch sizes must agree. One
      extra probe is probe 0 with near-ties planted (values within two ulps of each maximum
      along the last axis of its floating inputs), which exposes batch-dependent comparisons
      such as argmax keys; it is only compared with itself alone, never with the reference.
Label: broken (did not run / incorrect), else variant (any bit differs), else invariant.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # a bench script: run from a checkout that may not be installed

from gates.contract import Task, TaskError, get_task, load_task, tasks_dir  # noqa: E402
from gates.corpus import Measured, load_manifest, manifest_path, save_manifest  # noqa: E402
from gates.reference import as_outputs, make_inputs, reference_fn  # noqa: E402

MARK = "@@measure "
CPU_SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 16, 17, 33, 64, 128, 256, 512]
CPU_FULL = 33  # CPU sizes up to this one run every context
CONTEXTS = ("random", "zeros", "large", "nonfinite")
PROBE_SEED, POOL_SEED, CORRECT_SEED = 11, 12, 1
PROBES = 4  # generated probe rows; one more, the near-tie probe, is derived from probe 0
NEAR_TIE = PROBES  # its index among the probes
ULPS = (-2, -1, 0, 1, 2)  # planted near-ties: ulps from the row maximum
CACHE = os.environ.get("MEASURE_CORPUS_CACHE")  # set by the parent for its children
HEARTBEAT = lambda phase, note: None  # noqa: E731 - the child's progress reporter, once it runs
GEN_ELEMENTS = 2**26  # distinct pool rows generated per pool; more rows repeat them (fast start)
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class Broken(Exception):
    """The candidate failed to run or gave a wrong result; the message is the one-line detail."""


class Variant(Exception):
    """A bitwise difference was found; the message is the first counterexample."""


# --------------------------------------------------------------------------------------------
# Batch sizes
# --------------------------------------------------------------------------------------------
def _spread(xs: list[int]) -> list[int]:
    """xs reordered coarse to fine (midpoints first), so a sweep cut short still spans the range."""
    out, spans = [], [(0, len(xs))]
    while spans:
        nxt = []
        for lo, hi in spans:
            if lo < hi:
                mid = (lo + hi) // 2
                out.append(xs[mid])
                nxt += [(lo, mid), (mid + 1, hi)]
        spans = nxt
    return out


def ends_first(xs: list[int]) -> list[int]:
    """xs alternating from the largest and the smallest, so a short sweep sees both ends."""
    xs, out = sorted(set(xs)), []
    while xs:
        out.append(xs.pop())
        if xs:
            out.append(xs.pop(0))
    return out


def cuda_sizes(sm_count: int, limit: int = 4096) -> list[int]:
    """Priority-ordered sweep over 1..limit: the sizes where libraries switch strategy first
    (small, powers of two and their neighbours, multiples of the SM count; alternately from the
    large and the small end), then the rest of a dense sweep (1..64, every 8 to 512)."""
    key = [1, 2, 3, 4, 5, 7, 8, 9]
    p = 16
    while p <= limit:
        key += [p - 1, p, p + 1]
        p *= 2
    for m in (sm_count, 2 * sm_count):
        key += [m - 1, m, m + 1]
    dense = set(range(1, 65)) | set(range(72, 513, 8)) | set(key)
    key = ends_first([s for s in key if 1 <= s <= limit])
    rest = sorted(s for s in dense if s <= limit and s not in key)
    return key + _spread(rest)


# --------------------------------------------------------------------------------------------
# Comparing outputs
# --------------------------------------------------------------------------------------------
def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as same-width integers, so comparison is bitwise (NaN == NaN)."""
    t = t.detach().contiguous().reshape(-1)
    return t.view(BITS[t.element_size()]) if t.dtype != torch.bool else t.view(torch.uint8)


def bit_diff(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """None when a and b are bitwise equal, else how they differ (one line)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}"
    ne = _bits(a) != _bits(b)
    n = int(ne.sum())
    if n == 0:
        return None
    d = (a.detach().double().reshape(-1) - b.detach().double().reshape(-1)).abs()[ne]
    return f"max|diff|={float(d.max()):.3g} in {n}/{ne.numel()} elements"


def _first_row(a: torch.Tensor, b: torch.Tensor) -> int:
    """Index of the first row (axis 0) where a and b differ bitwise."""
    ne = (_bits(a) != _bits(b)).reshape(a.shape[0], -1).any(dim=1)
    return int(ne.nonzero()[0, 0])


def check_close(task: Task, dtype: str, got: tuple, want: tuple, where: str) -> None:
    """Raise Broken unless got matches want in count, shape, dtype and value (task tolerance)."""
    if len(got) != len(want):
        raise Broken(f"incorrect: {len(got)} outputs, expected {len(want)} ({where})")
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if not isinstance(g, torch.Tensor):
            raise Broken(f"incorrect: out[{k}] is {type(g).__name__}, not a tensor ({where})")
        if g.shape != w.shape or g.dtype != w.dtype:
            raise Broken(f"wrong shape/dtype: out[{k}] {tuple(g.shape)} {g.dtype}, expected "
                         f"{tuple(w.shape)} {w.dtype} ({where})")
        if g.device != w.device:
            raise Broken(f"incorrect: out[{k}] on {g.device}, expected {w.device} ({where})")
        if w.is_floating_point():
            tol = task.tolerance[dtype]
            gd, wd = g.double(), w.double()
            bad = ~((gd - wd).abs() <= tol.atol + tol.rtol * wd.abs()) & ~(gd.isnan() & wd.isnan())
        else:
            # Integer outputs must match exactly, except int8 quantised values, where float
            # rounding of x / scale may legitimately land one step away.
            slack = 1 if w.dtype == torch.int8 else 0
            bad = (g.long() - w.long()).abs() > slack
        n = int(bad.sum())
        if n:
            diff = (g.double() - w.double()).abs()[bad]
            raise Broken(f"incorrect: out[{k}] max|diff|={float(diff.nan_to_num(float('inf')).max()):.3g} "
                         f"in {n}/{bad.numel()} elements beyond tolerance ({where})")


# --------------------------------------------------------------------------------------------
# Batches around a probe row
# --------------------------------------------------------------------------------------------
def cached_inputs(task: Task, dims: dict[str, int], dtype: str, seed: int, device: str) -> dict:
    """make_inputs, shared between the candidates of a task through the parent's cache folder:
    the reference generator runs on the CPU, and large shapes take seconds to generate.
    One child generates each entry (a lock file), the others wait for it and load it."""
    if not CACHE:
        return make_inputs(task, dims, dtype, seed, device)
    key = "-".join(f"{k}{v}" for k, v in sorted(dims.items()))
    path = Path(CACHE) / f"{task.name}-{dtype}-{seed}-{key}.pt"
    try:
        os.close(os.open(f"{path}.lock", os.O_CREAT | os.O_EXCL))
        owner = True
    except FileExistsError:
        owner = False
    if not owner:
        deadline, beat = time.monotonic() + 120, time.monotonic() + 5
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
            if time.monotonic() > beat:  # tell the parent this child is waiting, not hung
                HEARTBEAT("waiting for inputs", path.name)
                beat += 5
    if path.exists():
        kw = torch.load(path)
    else:
        kw = make_inputs(task, dims, dtype, seed, "cpu")
        if owner:
            torch.save(kw, f"{path}.tmp")
            os.replace(f"{path}.tmp", path)
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}


def _row_size(task: Task, dims: dict[str, int]) -> tuple[int, int]:
    """Elements and float32 bytes of one row of the batched inputs."""
    one = make_inputs(task, {**dims, task.batch_axis: 1}, "float32", 0, "cpu")
    rows = [one[a] for a in task.batched_args]
    return sum(t.numel() for t in rows) or 1, sum(t.numel() * t.element_size() for t in rows) or 1


def _pool(task: Task, dims: dict[str, int], rows: int, dtype: str, seed: int, device: str) -> dict:
    """`rows` rows of batched inputs: the reference generator's rows, repeated past what
    GEN_ELEMENTS allows to generate (a batch of 4096 long rows would take minutes on the CPU)."""
    per_row = _row_size(task, dims)[0]
    distinct = max(1, min(rows, GEN_ELEMENTS // per_row))
    gen = cached_inputs(task, {**dims, task.batch_axis: distinct}, dtype, seed, device)
    if distinct == rows:
        return gen
    idx = torch.arange(rows, device=device) % distinct
    return {a.name: gen[a.name][idx] if a.batched else gen[a.name] for a in task.args}


def with_near_ties(t: torch.Tensor, seed: int) -> torch.Tensor:
    """A copy of one batched row where every vector along the last axis gets, at random other
    positions (in increasing order of value), copies of its maximum and values one and two ulps
    below and above it. Generated inputs hold exact ties at most; a kernel whose comparisons
    (argmax keys, top-k) depend on the batch may resolve values this close differently."""
    n = t.shape[-1]
    vec = t.detach().to("cpu", copy=True).reshape(-1, n)
    if n < 2 or not vec.is_floating_point():
        return t.clone()
    k = min(len(ULPS), n - 1)
    # Fewer slots than ULPS (short axes): one ulp above first, then the exact tie, then the rest.
    chosen = sorted(sorted(ULPS, key=lambda u: (abs(u - 0.5), -u))[:k])
    hi = vec.max(dim=-1, keepdim=True)
    rank = torch.rand(vec.shape, generator=torch.Generator().manual_seed(seed))
    rank.scatter_(1, hi.indices, float("inf"))  # keep the maximum where it is
    where = rank.argsort(dim=-1)[:, :k].sort(dim=-1).values

    def step(x: torch.Tensor, ulps: int) -> torch.Tensor:
        for _ in range(abs(ulps)):
            x = torch.nextafter(x, torch.full_like(x, math.copysign(math.inf, ulps)))
        return x

    vec.scatter_(1, where, torch.cat([step(hi.values, u) for u in chosen], dim=1))
    return vec.reshape(t.shape).to(t.device)


class BatchMaker:
    """Builds batches of size B that hold probe rows (from a separate seed) at the first, middle
    and last positions, beside co-batched rows of one context. Several probes, so that a
    reduction order change that happens to round one row the same way still shows."""

    def __init__(self, task: Task, dims: dict[str, int], dtype: str, device: str, bmax: int):
        self.B = task.batch_axis
        self.batched = [a for a in task.args if a.batched]
        pool = _pool(task, dims, bmax, dtype, POOL_SEED, device)
        probes = make_inputs(task, {**dims, self.B: PROBES}, dtype, PROBE_SEED, device)
        self.pool = {a.name: pool[a.name] for a in self.batched}
        self.shared = {a.name: pool[a.name] for a in task.args if not a.batched}
        self.probes = {a.name: probes[a.name] for a in self.batched}
        # A ragged padded axis (decode_attention's L -> seq_lens): each probe alone is padded to
        # exactly its own length, in batches to L or 2L beside longer rows ("long"), or as
        # tight as the probes allow ("tight"). Half the probes are short, so that the padded
        # length around them changes many times over.
        self.ragged: dict[str, int] = {}
        if task.ragged and len(task.ragged) == 1:
            axis, lens = next(iter(task.ragged.items()))
            padded = [a for a in self.batched if a.padded_axis == axis]
            if padded and lens in self.probes:
                self.L0, self.lens = dims[axis], lens
                long = _pool(task, {**dims, axis: 2 * self.L0}, bmax, dtype, POOL_SEED + 1, device)
                self.long = {a.name: long[a.name] for a in self.batched}
                self.ragged = {a.name: a.axes.index(axis) for a in padded}
                plens = self.probes[lens]
                for j in range(0, PROBES, 2):
                    plens[j] = min(int(plens[j]), max(1, self.L0 // 8))
        # The near-tie probe: probe 0 with near-ties planted in its floating inputs, compared
        # only with itself computed alone (never with the reference).
        self.probes = {name: torch.cat([t, with_near_ties(t[:1], PROBE_SEED + k)])
                       for k, (name, t) in enumerate(self.probes.items())}

    @property
    def contexts(self) -> tuple[str, ...]:
        return CONTEXTS + (("long", "tight") if self.ragged else ())

    def alone(self, j: int) -> dict:
        """Probe j by itself: a batch of one (padded to exactly its own length, if ragged)."""
        kw = {**self.shared, **{k: v[j:j + 1] for k, v in self.probes.items()}}
        if self.ragged:
            own = int(self.probes[self.lens][j])
            for name, ax in self.ragged.items():
                kw[name] = kw[name].narrow(ax, 0, own)
        return kw

    @staticmethod
    def slots(size: int) -> dict[int, int]:
        """Position -> probe index; probes rotate with the size so each sits at every position."""
        return {pos: (i + size) % (PROBES + 1) for i, pos in enumerate(sorted({0, size // 2, size - 1}))}

    def build(self, size: int, ctx: str) -> tuple[dict, dict[int, int]] | None:
        """The batch's keyword arguments and its probe slots; None if ctx does not apply."""
        slots = self.slots(size)
        kw = dict(self.shared)
        src = self.long if ctx == "long" else self.pool
        tight = 0
        if ctx == "tight":
            tight = max(int(self.probes[self.lens][j]) for j in slots.values())
            if tight >= self.L0:
                return None
        for a in self.batched:
            t = src[a.name][:size].clone()
            if ctx == "zeros" and t.is_floating_point():
                t.zero_()
            elif ctx == "large" and t.is_floating_point():
                t.mul_(1e3)
            elif ctx == "nonfinite" and t.is_floating_point():
                # inf, -inf and NaN at the start of every co-batched row: none may reach a probe.
                flat = t.view(size, -1)
                n = min(3, flat.shape[1])
                values = [math.inf, -math.inf, math.nan][:n]
                flat[:, :n] = torch.tensor(values, dtype=t.dtype, device=t.device)
            ax = self.ragged.get(a.name)
            if ax is not None and ctx == "tight":
                t = t.narrow(ax, 0, tight).contiguous()
            for pos, j in slots.items():
                row = self.probes[a.name][j]
                if ax is not None and ctx == "long":
                    t[pos].narrow(ax - 1, 0, self.L0).copy_(row)  # the rest stays padding garbage
                elif ax is not None and ctx == "tight":
                    t[pos].copy_(row.narrow(ax - 1, 0, tight))
                else:
                    t[pos] = row
            kw[a.name] = t
        if ctx in ("long", "tight"):
            lens = kw[self.lens]
            if ctx == "long":
                lens.fill_(2 * self.L0)
            else:
                lens.clamp_(max=tight)
            for pos, j in slots.items():
                lens[pos] = self.probes[self.lens][j]
        return kw, slots


# --------------------------------------------------------------------------------------------
# The child: one candidate
# --------------------------------------------------------------------------------------------
class Oracle:
    """Measures one candidate in this process; `emit` reports progress to the parent."""

    def __init__(self, task: Task, path: Path, device: str, sizes: list[int] | None, budget: float,
                 mem_gib: float, emit):
        self.task, self.path, self.device, self.budget, self._emit = task, path, device, budget, emit
        self.where = "start"
        self.mem = mem_gib * 2**30
        self.sizes = sizes
        self.calls = 0
        self.fn = None
        self.batched_out = [k for k, o in enumerate(task.outputs) if o.batched]

    def emit(self, phase: str, note: str) -> None:
        self.where = f"{phase} {note}"
        self._emit(phase, note)

    def call(self, kwargs: dict, clone: bool = True) -> tuple:
        """The candidate's outputs; inputs are cloned unless used once (a candidate may write
        into its inputs, and pools are large)."""
        kw = {k: v.clone() if clone and isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        out = as_outputs(self.fn(**kw))
        if self.device == "cuda":
            torch.cuda.synchronize()
        self.calls += 1
        return out

    def load(self) -> None:
        spec = importlib.util.spec_from_file_location(f"candidate_{self.path.stem}", self.path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise Broken(f"syntax error line {exc.lineno}: {exc.msg}") from None
        except Exception as exc:
            raise Broken(f"import failed: {one_line(exc)}") from None
        self.fn = getattr(module, self.task.entry, None)
        if not callable(self.fn):
            raise Broken(f"defines no function {self.task.entry!r}")

    def correctness(self) -> None:
        ref = reference_fn(self.task)
        for dtype in self.task.dtypes:
            for dims in self.task.shapes_for(self.device):
                where = f"{dtype} " + " ".join(f"{k}={v}" for k, v in dims.items())
                inputs = cached_inputs(self.task, dims, dtype, CORRECT_SEED, self.device)
                want = as_outputs(ref(**{k: v.clone() if isinstance(v, torch.Tensor) else v
                                         for k, v in inputs.items()}))
                try:
                    got = self.call(inputs, clone=False)
                except Exception as exc:
                    raise Broken(f"failed ({where}): {one_line(exc)}") from None
                check_close(self.task, dtype, got, want, where)
                self.emit("correctness", where)

    def plan(self) -> tuple[dict[str, int], int, list[int]]:
        """Base dims, the largest batch that fits the memory budget, and the sweep's sizes."""
        dims = self.task.dims_for(self.device, {})
        row = _row_size(self.task, dims)[1]
        # Pools in float32 and bfloat16 (x1.5), tripled by the pool of doubled padded length,
        # plus a batch being built and one being passed (of the longer length, for ragged tasks).
        per_row = row * 1.5 * 3 + 2 * row * 2 if self.task.ragged else row * 1.5 + 2 * row
        bmax = max(1, int(self.mem // per_row))
        if self.sizes:
            sizes = self.sizes
        elif self.device == "cuda":
            sizes = cuda_sizes(torch.cuda.get_device_properties(0).multi_processor_count)
        else:
            # Ascending: the small sizes in every context first, then the thresholds as the budget
            # allows (a 512-row batch costs seconds per call in the interpreter).
            sizes = sorted(self.task.bi.cpu_batch_sizes or CPU_SIZES)
        capped = [s for s in sizes if s <= bmax] or [1]
        return dims, min(bmax, max(capped)), capped

    def determinism(self, makers: dict[str, BatchMaker], sizes: list[int]) -> str | None:
        """The same call repeated at a few sizes; the first difference, or None."""
        top = max(sizes)
        probe_sizes, repeats = sorted({1, top} | {s for s in (7, 64, 512) if s <= top}), 4
        if self.device == "cpu":
            # The interpreter runs programs one at a time; a small batch is enough there.
            probe_sizes, repeats = [min((s for s in sizes if s > 1), default=1)], 3
        for dtype, mk in makers.items():
            for size in probe_sizes:
                kw = mk.build(size, "random")[0]
                first = self.call(kw)
                for rep in range(1, repeats):
                    again = self.call(kw)
                    for k, (a, b) in enumerate(zip(first, again, strict=True)):
                        diff = bit_diff(b, a)
                        if diff:
                            row = _first_row(b, a) if b.shape == a.shape and b.dim() else 0
                            return (f"nondeterministic: out[{k}] {dtype} B={size} repeat {rep} row {row}: "
                                    f"{diff}")
            self.emit("determinism", dtype)
        return None

    def _alone(self, mk: BatchMaker, dtype: str) -> list[tuple]:
        """Each probe's outputs computed by itself; probe 0 repeated, which must not change."""
        alone = [self.call(mk.alone(j)) for j in range(PROBES + 1)]
        for rep in range(2):
            again = self.call(mk.alone(0))
            for k, (a, b) in enumerate(zip(alone[0], again, strict=True)):
                if bit_diff(b, a):
                    raise Variant(f"out[{k}] {dtype} B=1 alone, repeat {rep + 1}: {bit_diff(b, a)}")
        return alone

    def _probes(self, got: tuple, size: int, slots: dict, ctx: str, dtype: str, alone: list) -> None:
        for k in self.batched_out:
            if got[k].shape[0] != size:
                raise Broken(f"wrong shape: out[{k}] has {got[k].shape[0]} rows for batch {size}")
            # All slots in one comparison (one device sync); the first differing one is reported.
            want = torch.cat([alone[j][k][0:1] for j in slots.values()])
            if bit_diff(got[k][list(slots)], want):
                i = _first_row(got[k][list(slots)], want)
                pos, j = list(slots.items())[i]
                probe = f"near-tie probe {j}" if j == NEAR_TIE else f"probe {j}"
                raise Variant(f"out[{k}] {dtype} B={size} pos={pos} ctx={ctx}: {probe} vs alone (B=1): "
                              f"{bit_diff(got[k][pos:pos + 1], want[i:i + 1])}")

    def sweep(self, makers: dict[str, BatchMaker], sizes: list[int]) -> str:
        """Probe rows across sizes, positions and contexts; raise Variant at the first difference."""
        deadline = time.monotonic() + self.budget
        swept = [s for s in sizes if s > 1]  # a batch of one is the probe alone
        # float32 first: it shows one-ulp differences that bfloat16 rounding hides.
        order = sorted(makers, key=lambda d: d != "float32")
        done = 0
        for dtype in order:
            mk, prev = makers[dtype], None
            alone = self._alone(mk, dtype)
            for size in swept:
                if time.monotonic() > deadline:
                    return f"budget {self.budget:g}s: {done}/{len(swept) * len(order)} (dtype, size) swept"
                # On the CPU, sizes past CPU_FULL rows only in fresh random context (and permuted).
                big = self.device == "cpu" and size > CPU_FULL
                for ctx in mk.contexts[:1] if big else mk.contexts:
                    built = mk.build(size, ctx)
                    if built is None:
                        continue
                    kw, slots = built
                    if ctx == "random":  # permuted before the call: the call may write into kw
                        perm = torch.randperm(size, generator=torch.Generator().manual_seed(size))
                        pkw = {k: v[perm.to(v.device)] if k in mk.pool else v for k, v in kw.items()}
                    got = self.call(kw, clone=False)
                    self.emit("sweep", f"{dtype} B={size} {ctx}")  # big batches take a while
                    self._probes(got, size, slots, ctx, dtype, alone)
                    if ctx == "random":
                        self._shared_rows(got, size, slots, dtype, prev)
                        prev = (size, got, slots)
                        self._permuted(pkw, perm, got, dtype)
                done += 1
                self.emit("sweep", f"{dtype} B={size}")
        return ""

    def _shared_rows(self, got: tuple, size: int, slots: dict, dtype: str, prev) -> None:
        """Rows that are not probes hold the same pool rows at every size: they must agree with
        the previous size's, which checks every row, not only the probes."""
        if prev is None:
            return
        psize, pgot, pslots = prev
        keep = [i for i in range(min(size, psize)) if i not in slots and i not in pslots]
        if not keep:
            return
        idx = torch.tensor(keep, device=got[0].device)
        for k in self.batched_out:
            a, b = got[k][idx], pgot[k][idx]
            if bit_diff(a, b):
                i = _first_row(a, b)
                raise Variant(f"out[{k}] {dtype} row {keep[i]}: B={size} vs B={psize} ctx=random: "
                              f"{bit_diff(a[i:i + 1], b[i:i + 1])}")

    def _permuted(self, pkw: dict, perm: torch.Tensor, got: tuple, dtype: str) -> None:
        """The same rows in another order must give the same rows, permuted."""
        size = len(perm)
        pgot = self.call(pkw, clone=False)
        for k in self.batched_out:
            want = got[k][perm.to(got[k].device)]
            if bit_diff(pgot[k], want):
                i = _first_row(pgot[k], want)
                raise Variant(f"out[{k}] {dtype} B={size} ctx=permuted: row from pos {int(perm[i])} at "
                              f"pos {i}: {bit_diff(pgot[k][i:i + 1], want[i:i + 1])}")

    def run(self) -> dict:
        res = {"label": "broken", "bi": None, "deterministic": None, "correct": None, "detail": "",
               "seconds": {}, "coverage": {}}
        t0 = phase_t = time.monotonic()

        def lap(name):
            nonlocal phase_t
            now = time.monotonic()
            res["seconds"][name] = round(now - phase_t, 2)
            phase_t = now

        try:
            self.load()
            lap("import")
            self.correctness()
            res["correct"] = True
            lap("correctness")
            dims, bmax, sizes = self.plan()
            makers = {d: BatchMaker(self.task, dims, d, self.device, bmax) for d in self.task.dtypes}
            res["coverage"] = {"sizes": len(sizes), "max_batch": max(sizes), "dims": dims}
            nondet = self.determinism(makers, sizes)
            res["deterministic"] = nondet is None
            lap("determinism")
            try:
                cut = self.sweep(makers, sizes)
                res["bi"] = True
            except Variant as exc:
                res["bi"], cut = False, ""
                res["detail"] = str(exc)
            lap("sweep")
            if nondet:
                res["detail"] = nondet
            res["label"] = "invariant" if res["bi"] and res["deterministic"] else "variant"
            if res["label"] == "invariant":
                ctxs = "/".join(makers[self.task.dtypes[0]].contexts)
                res["detail"] = (f"bitwise equal over {len(sizes)} batch sizes {min(sizes)}..{max(sizes)}, "
                                 f"{'+'.join(sorted(makers, reverse=True))}, contexts {ctxs}/permuted, "
                                 f"{self.calls} calls" + (f"; {cut}" if cut else ""))
        except Broken as exc:
            res["correct"] = False
            res["detail"] = str(exc)
        except Exception as exc:
            res["correct"] = False
            res["detail"] = f"failed after {self.where}: {one_line(exc)}"
        res["seconds"]["total"] = round(time.monotonic() - t0, 2)
        res["calls"] = self.calls
        return res


def one_line(exc: BaseException) -> str:
    """An exception as one short line; Triton compile errors put the message on the last line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = (lines[-1] if lines and lines[0].startswith("at ") else lines[0]) if lines else ""
    return f"{type(exc).__name__}: {text}"[:240]


def child_main(args: argparse.Namespace) -> None:
    def emit(kind: str, payload) -> None:
        print(MARK + json.dumps({kind: payload}), flush=True)

    emit("progress", "started")  # imports done: the parent's stall clock starts from here
    torch.set_num_threads(args.threads)  # input generation on the CPU; jobs share the cores
    task = get_task(args.child[0])
    path = task.candidates_dir / args.child[1]
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    if args.device == "cuda" and not torch.cuda.is_available():
        emit("result", {"label": "broken", "detail": "no CUDA device", "seconds": {}})
        return
    global HEARTBEAT
    HEARTBEAT = lambda phase, note: emit("progress", f"{phase} {note}")  # noqa: E731
    oracle = Oracle(task, path, args.device, sizes, args.budget, args.mem_gib, HEARTBEAT)
    try:
        result = oracle.run()
    except BaseException:  # noqa: BLE001 - the parent must always get a result line
        result = {"label": "broken", "detail": "oracle error: " + traceback.format_exc().splitlines()[-1]}
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (interpreter)"
    result["env"] = {"torch": torch.__version__, "triton": _triton_version(), "device": name}
    emit("result", result)


def _triton_version() -> str:
    try:
        import triton
        return triton.__version__
    except Exception:
        return "?"


# --------------------------------------------------------------------------------------------
# The parent: all candidates, in parallel child processes
# --------------------------------------------------------------------------------------------
def kill_group(pgid: int) -> None:
    """Kill one of our own children with whatever it started (its own session and group)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


ACTIVE: set[int] = set()  # process groups of the running children
STOP = threading.Event()  # set when the parent is interrupted: start no more, keep no more


def run_child(task: Task, file: str, args: argparse.Namespace) -> dict | None:
    """Measure one candidate in a child process; hangs and crashes become `broken`."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", task.name, file,
           "--device", args.device, "--budget", str(args.budget), "--mem-gib", str(args.mem_gib)]
    if args.sizes:
        cmd += ["--sizes", args.sizes]
    cmd += ["--threads", str(max(1, (os.cpu_count() or 1) // args.n_jobs))]
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, AGENTLOOP_TASKS=str(task.tasks_dir), PYTHONPATH=path)
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    t0 = time.monotonic()
    if STOP.is_set():
        return None
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                start_new_session=True, cwd=REPO)
        ACTIVE.add(proc.pid)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        result, last, last_t = None, "start", time.monotonic()
        while True:
            now = time.monotonic()
            wait = min(args.stall - (now - last_t), args.timeout - (now - t0))
            try:
                line = lines.get(timeout=max(wait, 0.01))
            except queue.Empty:
                kill_group(proc.pid)
                stalled = time.monotonic() - last_t >= args.stall
                why = f"no progress for {args.stall:g}s" if stalled else f"over {args.timeout:g}s"
                result = {"label": "broken", "correct": False,
                          "detail": f"timed out ({why}) after: {last}"}
                break
            if line is None:
                break
            if line.startswith(MARK):
                msg = json.loads(line[len(MARK):])
                last, last_t = msg.get("progress", last), time.monotonic()
                result = msg.get("result", result)
        proc.wait()
        ACTIVE.discard(proc.pid)
        if STOP.is_set():
            return None
        if result is None:
            err.seek(0)
            tail = [ln.strip() for ln in err.read().splitlines() if ln.strip()]
            code = proc.returncode
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited {code}"
            result = {"label": "broken", "correct": False,
                      "detail": f"crashed ({how}) after: {last}" + (f": {tail[-1][:160]}" if tail else "")}
    result["wall"] = round(time.monotonic() - t0, 1)
    return result


def readable_suite() -> dict[str, Task]:
    """The task files that load; others (perhaps being written right now) are reported and skipped."""
    suite = {}
    for path in sorted(tasks_dir().glob("*.yaml")):
        try:
            suite[path.stem] = load_task(path)
        except TaskError as exc:
            print(f"skip {path.name}: {exc}", flush=True)
    return suite


def select(args: argparse.Namespace) -> list[tuple[Task, object]]:
    suite = readable_suite()
    names = args.tasks.split(",") if args.tasks else list(suite)
    unknown = [n for n in names if n not in suite]
    if unknown:
        sys.exit(f"error: unknown task {unknown[0]!r}; known tasks: {', '.join(suite)}")
    jobs = []
    for name in names:
        task = suite[name]
        if not manifest_path(task).is_file():
            print(f"skip {name}: no {manifest_path(task).relative_to(task.tasks_dir)} yet", flush=True)
            continue
        for entry in load_manifest(task).candidates:
            if args.match and not any(m in entry.file for m in args.match.split(",")):
                continue
            jobs.append((task, entry))
    return jobs


def expected_cost(task: Task, entry, device: str) -> tuple[bool, int]:
    """A rough ordering key: autotuned candidates (which benchmark every new shape), then the
    task's correctness work, so that the longest children start first."""
    path = task.candidates_dir / entry.file
    autotuned = path.is_file() and "autotune" in path.read_text()
    return autotuned, sum(math.prod(d.values()) for d in task.shapes_for(device))


def command_line(env: dict | None) -> str:
    cmd = shlex.join(["python", "bench/measure_corpus.py", *sys.argv[1:]])
    if env:
        cmd += f"  [torch {env['torch']}, triton {env['triton']}, {env['device']}]"
    return cmd


def to_measured(result: dict, command: str) -> Measured:
    keep = {k: result.get(k) for k in ("label", "bi", "deterministic", "correct")}
    return Measured(**keep, detail=result.get("detail", ""), command=command)


def write_manifests(rows: list[dict], device: str, command: str) -> None:
    """Record measurements in the manifests (only the measured entries, only this device's field)."""
    suite = readable_suite()
    for name in dict.fromkeys(r["task"] for r in rows):
        task = suite[name]
        manifest = load_manifest(task)
        got = {r["file"]: r for r in rows if r["task"] == name and not r.get("missing")}
        for entry in manifest.candidates:
            if entry.file in got:
                setattr(entry, "gpu" if device == "cuda" else "cpu", to_measured(got[entry.file], command))
        save_manifest(task, manifest)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], required=True)
    ap.add_argument("--tasks", help="comma-separated task names (default: all)")
    ap.add_argument("--match", help="only candidate files whose name contains this (or, comma-separated, "
                                    "any of these)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="parallel children (default 4 on cuda, cores on cpu)")
    ap.add_argument("--write", action="store_true", help="record labels in the manifests and docs/corpus.md")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a candidate may take in all")
    ap.add_argument("--stall", type=float, default=None,
                    help="seconds without progress that count as a hang (default 60 cuda, 180 cpu)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for the batch sweep per candidate (default 10 cuda, 60 cpu)")
    ap.add_argument("--sizes", help="comma-separated batch sizes instead of the default sweep")
    ap.add_argument("--mem-gib", type=float, default=None, help="input pool memory per candidate")
    ap.add_argument("--json", help="write every result to this JSON file")
    ap.add_argument("--from-json", help="skip measuring: report (and --write) a JSON file of a previous run")
    ap.add_argument("--doc", default=str(REPO / "docs" / "corpus.md"), help="where --write renders the table")
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=2, metavar=("TASK", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    args.budget = args.budget if args.budget is not None else (10.0 if cuda else 60.0)
    args.stall = args.stall if args.stall is not None else (60.0 if cuda else 180.0)
    args.mem_gib = args.mem_gib if args.mem_gib is not None else (12.0 if cuda else 0.25)
    if args.child:
        child_main(args)
        return

    if args.from_json:
        # Results measured elsewhere (the GPU machine, whose tree does not come back): record them.
        saved = json.loads(Path(args.from_json).read_text())
        if saved["device"] != args.device:
            sys.exit(f"error: {args.from_json} holds {saved['device']} results, not {args.device}")
        report(saved["results"], None, args, saved["command"])
        return
    jobs = sorted(select(args), key=lambda job: expected_cost(*job, args.device), reverse=True)
    cache = tempfile.mkdtemp(prefix="measure_corpus_")
    os.environ["MEASURE_CORPUS_CACHE"] = cache  # inherited by the children
    try:
        rows, t0 = measure_all(jobs, args)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    report(rows, t0, args)


def measure_all(jobs: list, args: argparse.Namespace) -> tuple[list[dict], float]:
    """Run the children, the longest-looking first, and print a line as each one ends."""
    n_jobs = args.n_jobs = args.jobs or (4 if args.device == "cuda" else os.cpu_count() or 1)
    print(f"measuring {len(jobs)} candidates on {args.device} with {n_jobs} jobs", flush=True)
    rows: list[dict] = []
    t0 = time.monotonic()

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)  # e.g. `timeout`: still report what finished
    pool = ThreadPoolExecutor(n_jobs)
    try:
        futures = {}
        for task, entry in jobs:
            if (task.candidates_dir / entry.file).is_file():
                futures[pool.submit(run_child, task, entry.file, args)] = (task, entry)
            else:
                rows.append({"task": task.name, "file": entry.file, "expected": entry.expected,
                             "mechanism": entry.mechanism, "label": "broken", "missing": True,
                             "detail": "file not found", "wall": 0.0})
        for i, fut in enumerate(as_completed(futures), 1):
            task, entry = futures[fut]
            row = {"task": task.name, "file": entry.file, "expected": entry.expected,
                   "mechanism": entry.mechanism, **fut.result()}
            rows.append(row)
            secs = " ".join(f"{k}={v}" for k, v in row.get("seconds", {}).items())
            flag = "" if row["label"] == entry.expected else f" (expected {entry.expected})"
            print(f"[{i}/{len(futures)}] {task.name}/{entry.file}: {row['label']}{flag} {row['wall']}s "
                  f"[{secs}] {row.get('detail', '')}", flush=True)
    except KeyboardInterrupt:
        STOP.set()
        for pgid in list(ACTIVE):
            kill_group(pgid)
        print(f"interrupted: reporting the {len(rows)} candidates measured so far", flush=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return rows, t0


def report(rows: list[dict], t0: float | None, args: argparse.Namespace, command: str = "") -> None:
    """The final table, the JSON file and, with --write, the manifests and docs/corpus.md."""
    rows.sort(key=lambda r: (r["task"], r["file"]))
    env = next((r["env"] for r in rows if r.get("env")), None)
    command = command or command_line(env)
    print(f"\n{'task':22} {'file':36} {'expected':9} {'measured':9} {'sec':>6}  detail")
    for r in rows:
        mark = " " if r["label"] == r["expected"] else "!"
        print(f"{r['task']:22} {r['file']:36} {r['expected']:9} {r['label']:9}{mark}{r['wall']:6.1f}  "
              f"{r.get('detail', '')[:110]}")
    counts = {lab: sum(r["label"] == lab for r in rows) for lab in ("invariant", "variant", "broken")}
    differ = sum(r["label"] != r["expected"] for r in rows)
    took = f" in {time.monotonic() - t0:.0f}s" if t0 is not None else ""
    print(f"\n{len(rows)} candidates{took}: "
          + ", ".join(f"{v} {k}" for k, v in counts.items()) + f"; {differ} differ from expected")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": command, "device": args.device, "results": rows},
                                              indent=1))
    if args.write:
        write_manifests(rows, args.device, command)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from corpus_table import write_doc

        write_doc(Path(args.doc))
        print(f"wrote manifests and {args.doc}")


if __name__ == "__main__":
    main()
