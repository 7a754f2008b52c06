"""The candidate corpus: kernel files per task and the manifest of their labels.

The manifest (`tasks/<task>/candidates/manifest.yaml`) holds each file's expected label and
mechanism, and the labels measured on GPU and on the CPU interpreter. It is never shown to an
LLM or to a gate: the candidate files themselves carry no hint of their label.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from gates.contract import Task

Label = Literal["invariant", "variant", "broken"]
Mechanism = Literal[
    "none",                    # batch-invariant by construction
    "split_k_from_batch",      # split-K / split-reduction count chosen from the batch size
    "split_kv_from_batch",     # split-KV count chosen from the number of sequences
    "reduction_tile_from_batch",  # block size along the reduced axis chosen from the batch size
    "autotune_on_batch",       # @triton.autotune keyed on the batch size, configs change the reduction
    "heuristics_on_batch",     # @triton.heuristics on the batch size changing the reduction
    "atomics",                 # partial results accumulated with tl.atomic_add
    "batch_dispatch",          # different kernels / code paths chosen by batch size
    "vendor_op",               # torch/cuBLAS op with batch-dependent heuristics on batched data
    "batch_global_scale",      # a value reduced over the whole batch feeds each row
    "padded_length_loop",      # loop bounds from the batch-wide padded length
    "compile_error",
    "wrong_result",
    "wrong_shape",
    "hang",
    "crash",
]


class Measured(BaseModel):
    """What bench/measure_corpus.py observed for one candidate on one device."""

    model_config = ConfigDict(extra="forbid")
    label: Label
    bi: bool | None = None
    deterministic: bool | None = None
    correct: bool | None = None
    detail: str = ""
    """First counterexample or error, one line."""
    command: str = ""


class CorpusEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str
    expected: Label
    mechanism: Mechanism
    note: str = ""
    gpu: Measured | None = None
    cpu: Measured | None = None
    disputed: str | None = None
    """Why the GPU measurement, which contradicts `expected`, is not conclusive (e.g. the sweep
    missed the inputs that expose the mechanism). Such entries are reported apart from the
    gates' confusion matrices until a better measurement settles them."""

    @property
    def section(self) -> str:
        """The part of the corpus the entry belongs to: the tag its note starts with
        ("[real-world style] ..."), else "original"."""
        if self.note.startswith("[") and "]" in self.note:
            return self.note[1:self.note.index("]")].strip() or "original"
        return "original"

    @property
    def measured_gpu_label(self) -> Label:
        """The label to trust on GPU: the measurement when there is one."""
        return self.gpu.label if self.gpu else self.expected


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    candidates: list[CorpusEntry]


def manifest_path(task: Task) -> Path:
    return task.candidates_dir / "manifest.yaml"


def load_manifest(task: Task) -> Manifest:
    return Manifest.model_validate(yaml.safe_load(manifest_path(task).read_text()))


def save_manifest(task: Task, manifest: Manifest) -> None:
    header = ("# Expected and measured labels of this task's candidates. Never shown to LLMs or gates.\n"
              "# gpu/cpu are written by bench/measure_corpus.py; where they contradict `expected`,\n"
              "# the measurement wins.\n")
    body = yaml.safe_dump(manifest.model_dump(mode="json", exclude_none=True), sort_keys=False, width=110)
    manifest_path(task).write_text(header + body)


def candidate_files(task: Task) -> list[Path]:
    """The corpus files of a task, in manifest order."""
    return [task.candidates_dir / e.file for e in load_manifest(task).candidates]
