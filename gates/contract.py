"""The task contract: a task file (`tasks/<name>.yaml`) loaded into pydantic models.

A task names the entry function a candidate defines, its arguments (which are batched along
axis 0), its outputs, the shapes and dtypes it is checked on, and its tolerances. The batch
contract it implies: row i of every batched output depends only on row i of the batched inputs
and on the unbatched inputs, bit for bit, whatever the batch around it.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gates.yaml_file import one_line, read_mapping

# "float" means the floating dtype the task is being run in (one of the task's `dtypes`).
ArgDtype = Literal["float", "float32", "bfloat16", "float16", "int64", "int32", "int8", "bool"]
RunDtype = Literal["bfloat16", "float32", "float16"]


class TaskError(ValueError):
    """A task file that cannot be used; the message is one line naming the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Arg(_Strict):
    """One parameter of the entry function, in call order."""

    name: str
    kind: Literal["tensor", "scalar"] = "tensor"
    axes: list[str] = Field(default_factory=list)
    """Axis names; a batched tensor's first axis is the task's batch axis."""
    dtype: ArgDtype = "float"
    batched: bool = False
    """True when axis 0 is the batch axis (rows belong to different requests)."""
    value: float | int | None = None
    """The value passed for a scalar argument."""
    padded_axis: str | None = None
    """An axis whose extent is the batch-wide padded length (decode_attention's L)."""


class Output(_Strict):
    """One output of the entry function, in return order."""

    name: str
    axes: list[str]
    dtype: ArgDtype = "float"
    batched: bool = True


class Tolerance(_Strict):
    atol: float
    rtol: float


class BISettings(_Strict):
    """Optional overrides for the dynamic gate's batch contexts."""

    cpu_batch_sizes: list[int] | None = None
    cuda_batch_sizes: list[int] | None = None
    dtypes: list[RunDtype] | None = None
    """Dtypes to check; default: float32 first, then the task's other dtypes (only the first
    on CPU)."""


class Baseline(_Strict):
    """A production implementation of the task's op: what a serving engine runs today (a vendor
    GEMM in bf16, torch's fused norm, the attention backend's decode path, a compiled graph).
    Trusted code like the reference; the benchmark times it beside every candidate, in the judge,
    never in the candidate's runner."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Names it in results and reports."""
    summary: str
    """What it is, one line."""
    source: Literal["baselines", "reference"] = "baselines"
    """Where its function is: the function called `name` in the task's `<task>/baselines.py`, or
    the reference's entry function (for `compile: true`, the compiled reference)."""
    compile: bool = False
    """Wrapped in `torch.compile(dynamic=False)`: timed only when the evaluation compiles
    (`eval.compile_reference`), as compiling costs seconds per shape."""


class Task(_Strict):
    """A task of the suite, as written in its YAML file."""

    name: str
    summary: str
    entry: str
    """Name of the function a candidate must define."""
    reference: str
    """Path of the plain-PyTorch reference module, relative to the tasks directory."""
    batch_axis: str = "T"
    args: list[Arg]
    outputs: list[Output]
    dtypes: list[RunDtype]
    dims: dict[str, int]
    """Non-batch dimensions used on GPU."""
    cpu_dims: dict[str, int]
    """Smaller non-batch dimensions used on CPU, where kernels run in Triton's interpreter."""
    shapes: list[dict[str, int]]
    """Correctness shapes on GPU: each sets the batch axis and may override dims."""
    cpu_shapes: list[dict[str, int]]
    bench_shapes: list[dict[str, int]]
    tolerance: dict[RunDtype, Tolerance]
    bi: BISettings = BISettings()
    ragged: dict[str, str] | None = None
    """Padded axis -> name of the int argument holding each row's valid length."""
    fp32_matmul: Literal["ieee", "tf32", "tf32x3"] = "ieee"
    """The precision float32 products must have, a task-level choice the prompt states: "ieee"
    (the default) and "tf32x3" are checked against an IEEE float32 reference at the float32
    tolerance, so `tl.dot` on float32 inputs needs `input_precision="ieee"` (or "tf32x3"), and a
    float32 mismatch of the size TF32 gives is reported as such with that fix; "tf32" lets kernels
    use TF32 tensor cores (Triton's default for float32 `tl.dot`, errors around 1e-3) and checks
    float32 at atol = rtol = 1e-2 at least (`gates.correctness.TF32_TOLERANCE`)."""
    baselines: list[Baseline] = Field(default_factory=list)
    """Production baselines timed beside every candidate (docs/benchmark.md); every task of the
    suite declares at least one."""

    path: Path | None = Field(default=None, exclude=True)

    @field_validator("shapes", "cpu_shapes", "bench_shapes")
    @classmethod
    def _positive(cls, shapes: list[dict[str, int]]) -> list[dict[str, int]]:
        for shape in shapes:
            for axis, size in shape.items():
                if size < 1:
                    raise ValueError(f"{axis}={size} must be at least 1")
        return shapes

    @model_validator(mode="after")
    def _axes_known(self) -> Task:
        known = set(self.dims) | {self.batch_axis}
        if set(self.cpu_dims) != set(self.dims):
            raise ValueError(f"cpu_dims must name the same axes as dims {sorted(self.dims)}")
        for group, items in (("args", self.args), ("outputs", self.outputs)):
            for i, item in enumerate(items):
                for axis in item.axes:
                    if axis not in known:
                        raise ValueError(f"{group}[{i}] ({item.name}): unknown axis {axis!r}; "
                                         f"known axes are {sorted(known)}")
                if item.batched and (not item.axes or item.axes[0] != self.batch_axis):
                    raise ValueError(f"{group}[{i}] ({item.name}): a batched tensor's first axis "
                                     f"must be the batch axis {self.batch_axis!r}")
        for i, arg in enumerate(self.args):
            if arg.kind == "scalar" and arg.value is None:
                raise ValueError(f"args[{i}] ({arg.name}): a scalar needs a value")
        for key in ("shapes", "cpu_shapes", "bench_shapes"):
            for shape in getattr(self, key):
                if self.batch_axis not in shape:
                    raise ValueError(f"{key}: every shape must set the batch axis {self.batch_axis!r}")
                for axis in shape:
                    if axis not in known:
                        raise ValueError(f"{key}: unknown axis {axis!r}")
        names = [b.name for b in self.baselines]
        twice = [n for i, n in enumerate(names) if n in names[:i]]
        if twice:
            raise ValueError(f"baselines: {twice[0]!r} is declared twice")
        missing = set(self.dtypes) - set(self.tolerance)
        if missing:
            raise ValueError(f"tolerance: no entry for dtype {sorted(missing)[0]}")
        return self

    # Derived views -------------------------------------------------------------------------
    @property
    def tasks_dir(self) -> Path:
        assert self.path is not None
        return self.path.parent

    @property
    def reference_path(self) -> Path:
        return self.tasks_dir / self.reference

    @property
    def baselines_path(self) -> Path:
        """The module of the task's production baselines (`<task>/baselines.py`)."""
        return self.tasks_dir / self.name / "baselines.py"

    @property
    def candidates_dir(self) -> Path:
        return self.tasks_dir / self.name / "candidates"

    @property
    def batched_args(self) -> list[str]:
        return [a.name for a in self.args if a.batched]

    def dims_for(self, device: str, shape: dict[str, int]) -> dict[str, int]:
        """Full dimensions for one shape on a device ("cpu" or "cuda")."""
        base = self.cpu_dims if device == "cpu" else self.dims
        return {**base, **shape}

    def shapes_for(self, device: str) -> list[dict[str, int]]:
        return [self.dims_for(device, s) for s in (self.cpu_shapes if device == "cpu" else self.shapes)]


def _defined_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


_loaded: dict[Path, tuple[tuple, Task]] = {}
"""Tasks already loaded, by absolute path, with the state of the files they were read from."""


def _files_state(*paths: Path) -> tuple:
    """What says a file is as it was: its modification time and size (None if it is gone)."""
    state = []
    for p in paths:
        try:
            st = p.stat()
            state.append((st.st_mtime_ns, st.st_size))
        except OSError:
            state.append(None)
    return tuple(state)


def load_task(path: str | Path) -> Task:
    """Load and validate one task file; raise TaskError with a one-line message. A task whose
    file, reference and baselines are unchanged since it was last loaded is not read again (the
    model check asks for each of its tasks once per runner: 27 parses of a few YAML files cost
    seconds). Tasks are frozen, so the same object serves every caller."""
    path = Path(path).absolute()
    known = _loaded.get(path)
    if known is not None:
        state, task = known
        if _files_state(path, task.reference_path, task.baselines_path) == state:
            return task
    before = _files_state(path)  # taken before reading: a change while it is read is seen next time
    task = _load_task(path)
    _loaded[path] = (before + _files_state(task.reference_path, task.baselines_path), task)
    return task


def _load_task(path: Path) -> Task:
    raw = read_mapping(path, "task file", TaskError)
    try:
        task = Task.model_validate({**raw, "path": path.absolute()})  # workers run elsewhere
    except ValidationError as exc:
        raise TaskError(f"{path}: {one_line(exc)}") from None
    if task.name != path.stem:
        raise TaskError(f"{path}: name: {task.name!r} must match the file name {path.stem!r}")
    ref = task.reference_path
    if not ref.is_file():
        raise TaskError(f"{path}: reference: file {ref} not found")
    try:
        functions = _defined_functions(ref)
    except SyntaxError as exc:
        raise TaskError(f"{path}: reference: {ref} line {exc.lineno}: syntax error") from None
    for needed in (task.entry, "make_inputs"):
        if needed not in functions:
            raise TaskError(f"{path}: entry: {ref} does not define function {needed!r}")
    wanted = [b.name for b in task.baselines if b.source == "baselines"]
    if wanted:
        module = task.baselines_path
        if not module.is_file():
            raise TaskError(f"{path}: baselines: file {module} not found")
        try:
            defined = _defined_functions(module)
        except SyntaxError as exc:
            raise TaskError(f"{path}: baselines: {module} line {exc.lineno}: syntax error") from None
        absent = [n for n in wanted if n not in defined]
        if absent:
            raise TaskError(f"{path}: baselines: {module} does not define function {absent[0]!r}")
    return task


def tasks_dir() -> Path:
    """The task suite's directory: $AGENTLOOP_TASKS, else `tasks/` of this checkout."""
    env = os.environ.get("AGENTLOOP_TASKS")
    # Absolute: workers and runners start in other directories, where a relative path breaks.
    return Path(env).expanduser().absolute() if env else Path(__file__).resolve().parents[1] / "tasks"


def load_suite(directory: str | Path | None = None) -> dict[str, Task]:
    """Every task file in the suite directory, by name."""
    directory = Path(directory) if directory else tasks_dir()
    return {t.name: t for t in (load_task(p) for p in sorted(directory.glob("*.yaml")))}


def get_task(name: str, directory: str | Path | None = None) -> Task:
    """One task by name; TaskError lists the valid names for an unknown one."""
    directory = Path(directory) if directory else tasks_dir()
    path = directory / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in directory.glob("*.yaml"))
        raise TaskError(f"unknown task {name!r}; known tasks: {', '.join(names)}")
    return load_task(path)
