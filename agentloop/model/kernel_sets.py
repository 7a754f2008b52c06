"""Kernel sets: the ops mapping a decoder runs on, each op saying where it came from.

A set is a plain Mapping of task name -> callable with the task's entry signature, so a set of
proxies to a caged runner process fits the same slot; `sources` names each op's origin for the
report. `file_ops` imports kernel files in this process and is for trusted files only (the
corpus in tests): untrusted kernels belong in a caged runner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from gates.contract import Task, get_task
from gates.reference import baseline_fn, reference_fn

MODEL_TASKS = ("rms_norm", "fused_add_rms_norm", "linear", "rotary_embedding", "decode_attention",
               "silu_and_mul", "greedy_sample", "token_logprobs", "moe_topk_softmax",
               "per_token_quant_int8")
"""Every task a model of any supported config may call."""


class KernelSet(Mapping):
    """Task name -> op, with `sources[task]` saying where each op came from."""

    def __init__(self, ops: Mapping[str, Callable], sources: Mapping[str, str]) -> None:
        self._ops, self.sources = dict(ops), dict(sources)

    def __getitem__(self, task: str) -> Callable:
        return self._ops[task]

    def __iter__(self) -> Iterator[str]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def replace(self, ops: Mapping[str, Callable], sources: Mapping[str, str]) -> KernelSet:
        """This set with some ops swapped."""
        return KernelSet({**self._ops, **ops}, {**self.sources, **sources})


def start_lanes(op: Callable, lanes: list[tuple]) -> Callable[[], list]:
    """`op` called on each argument tuple, in order; the function returned gives their results.
    An op with a `start_lanes` attribute (a caged runner's) sends them in one request now and
    reads the replies when asked, so requests to several runners can be out at once; any other
    op is called one call after the other, now."""
    start = getattr(op, "start_lanes", None)
    if start is not None:
        return start(lanes)
    results = [op(*args) for args in lanes]
    return lambda: results


def channel(op: Callable) -> object | None:
    """What `start_lanes` sends an op's calls to, which takes one request at a time (a caged
    runner: a second request before the first's replies are read would overwrite its inputs);
    None for an op called in this process. Wrappers of an op name the channel of what they wrap."""
    return getattr(op, "channel", None)


def _tasks(tasks: tuple[str, ...] | None) -> list[Task]:
    return [get_task(t) for t in (tasks or MODEL_TASKS)]


def reference_ops(tasks: tuple[str, ...] | None = None) -> KernelSet:
    """Each task's plain-PyTorch reference."""
    chosen = _tasks(tasks)
    return KernelSet({t.name: reference_fn(t) for t in chosen},
                     {t.name: f"reference ({t.reference})" for t in chosen})


def eager_ops(device: str = "cpu", tasks: tuple[str, ...] | None = None) -> KernelSet:
    """Each task's first uncompiled production baseline (tasks/<task>/baselines.py): what a
    serving engine runs eagerly on `device` today."""
    ops, sources = {}, {}
    for task in _tasks(tasks):
        baseline = next((b for b in task.baselines if b.source == "baselines" and not b.compile), None)
        if baseline is None:
            ops[task.name], sources[task.name] = reference_fn(task), "reference (no eager baseline)"
        else:
            ops[task.name] = baseline_fn(task, baseline)
            sources[task.name] = f"baseline {baseline.name} on {device}"
    return KernelSet(ops, sources)


class _Compiled:
    """`torch.compile(fn, dynamic=True)`, wrapped on the first call: importing the compiler takes
    seconds, which a set that is built but never run (on CPU) should not pay."""

    def __init__(self, fn: Callable) -> None:
        self.fn, self._compiled = fn, None

    def __call__(self, *args):
        if self._compiled is None:
            import torch

            self._compiled = torch.compile(self.fn, dynamic=True)
        return self._compiled(*args)


def compiled_ops(tasks: tuple[str, ...] | None = None) -> KernelSet:
    """Each reference under torch.compile with dynamic shapes: one graph serves every batch size,
    as a serving engine compiles its model (a static graph per batch size would recompile at
    every step)."""
    chosen = _tasks(tasks)
    return KernelSet({t.name: _Compiled(reference_fn(t)) for t in chosen},
                     {t.name: "torch.compile(reference, dynamic=True)" for t in chosen})


def torch_ops(kind: str, device: str, tasks: tuple[str, ...] | None = None) -> KernelSet:
    """The set of one of `set_spec.TORCH_KINDS`: eager, compiled or reference."""
    if kind == "eager":
        return eager_ops(device, tasks)
    return {"compiled": compiled_ops, "reference": reference_ops}[kind](tasks)


def file_ops(files: Mapping[str, str | Path], base: KernelSet | None = None) -> KernelSet:
    """Kernel files imported in this process (trusted files only), by task; tasks without a file
    come from `base` (default: the references)."""
    from gates.runner.loader import candidate_entry

    ops, sources = {}, {}
    for name, path in files.items():
        task = get_task(name)
        ops[name] = candidate_entry(path, task.entry)[1]
        sources[name] = f"file {Path(path)}"
    return (base if base is not None else reference_ops()).replace(ops, sources)
