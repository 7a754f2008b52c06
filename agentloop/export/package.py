"""Writing a kernel set as a package: `<out>/<name>/` with the kernel files (`kernels/<task>.py`,
verbatim), each task's reference (`references/<task>.py`, the fake implementation of its op), a
`manifest.json`, the custom ops (`ops.py`) and the ATen mode (`mode.py`), rendered from
`templates/`. The package imports torch and triton only."""

from __future__ import annotations

import json
import keyword
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from gates.contract import Task

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ROUTES = {
    "linear": [("mm", "_mm", "the kernel's bias is a zero vector"),
               ("addmm", "_addmm", "bias, then alpha/beta where they are not 1"),
               ("bmm", "_bmm", "one kernel call per matrix of the batch")],
    "softmax": [("_softmax", '_rows("softmax")', "any dim, moved last")],
    "log_softmax": [("_log_softmax", '_rows("log_softmax")', "any dim, moved last")],
}
"""The ATen ops a task's kernel replaces in `set_batch_invariant_mode()`, how, and what to know."""


class ExportError(ValueError):
    """A set that cannot be exported as asked; one line."""


@dataclass
class ExportKernel:
    """One task's kernel as it is exported, and what is known of it."""

    task: Task
    code: str
    origin: str
    """Where the kernel came from: a corpus file, a run's candidate, an archive row, a file."""
    verdicts: dict[str, Any] = field(default_factory=dict)
    """Each gate's verdict as recorded where it came from (gate -> pass/fail/detail)."""
    speed: dict[str, Any] = field(default_factory=dict)
    """Speed against the production baselines per regime, as measured where it came from."""


def _signature(task: Task) -> dict[str, str]:
    params, names = [], []
    for arg in task.args:
        names.append(arg.name)
        if arg.kind == "scalar":
            params.append(f"{arg.name}: {'int' if isinstance(arg.value, int) else 'float'}")
        else:
            params.append(f"{arg.name}: torch.Tensor")
    many = len(task.outputs) > 1
    return {"params": ", ".join(params), "call": ", ".join(names),
            "returns": f"tuple[{', '.join(['torch.Tensor'] * len(task.outputs))}]" if many
            else "torch.Tensor",
            "fresh": "tuple(out)" if many else "out"}


def _templates() -> Environment:
    return Environment(loader=PackageLoader("agentloop.export", "templates"), undefined=StrictUndefined,
                       keep_trailing_newline=True, trim_blocks=False)


def write_package(kernels: list[ExportKernel], out: str | Path, name: str, *, namespace: str | None = None,
                  manifest: dict[str, Any] | None = None, force: bool = False) -> Path:
    """Write the package `out/name/` and return its directory; ExportError (one line) for a bad
    name, an existing directory without `force`, or an empty set."""
    namespace = namespace or name
    for what, value in (("package name", name), ("namespace", namespace)):
        if not NAME.match(value) or keyword.iskeyword(value):
            raise ExportError(f"{what} {value!r} is not a Python identifier (letters, digits, _)")
    if not kernels:
        raise ExportError("the kernel set has no kernel to export (every task fell back to eager torch)")
    target = Path(out) / name
    if target.exists():
        if not force:
            raise ExportError(f"{target} exists; choose another --out or --name, or pass --force")
        shutil.rmtree(target)
    (target / "kernels").mkdir(parents=True)
    (target / "references").mkdir()
    (target / "kernels" / "__init__.py").write_text('"""The kernel files, verbatim."""\n')
    (target / "references" / "__init__.py").write_text(
        '"""Each task\'s plain-PyTorch reference: the fake implementation of its op."""\n')
    entries = []
    for k in sorted(kernels, key=lambda k: k.task.name):
        module = k.task.name
        (target / "kernels" / f"{module}.py").write_text(k.code)
        shutil.copyfile(k.task.reference_path, target / "references" / f"{module}.py")
        entries.append({"task": k.task.name, "module": module, "entry": k.task.entry,
                        "reference_entry": k.task.entry, "summary": k.task.summary.replace('"""', "'''"),
                        **_signature(k.task)})
    tasks = [e["task"] for e in entries]
    routes = [{"op": op, "fn": fn, "task": t, "note": note}
              for t in tasks for op, fn, note in ROUTES.get(t, [])]
    env = _templates()
    info = manifest or {}
    context = {"name": name, "namespace": namespace, "kernels": entries, "tasks": tasks, "routes": routes,
               "commit": info.get("commit")}
    for template in ("__init__.py", "ops.py", "mode.py"):
        (target / template).write_text(env.get_template(template + ".j2").render(**context))
    document = {**info, "package": name, "namespace": namespace,
                "routed_aten_ops": [f"aten::{r['op']}" for r in routes],
                "kernels": [{"task": k.task.name, "op": f"{namespace}::{k.task.name}",
                             "file": f"kernels/{k.task.name}.py", "origin": k.origin, "verdicts": k.verdicts,
                             "speed": k.speed}
                            for k in sorted(kernels, key=lambda k: k.task.name)]}
    (target / "manifest.json").write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    project = Path(out) / "pyproject.toml"
    if force or not project.exists():  # `pip install OUT` installs the package
        project.write_text(PYPROJECT.format(name=name))
    return target


PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"
description = "Batch-invariant kernels exported by agentloop"
requires-python = ">=3.10"
dependencies = ["torch", "triton"]

[tool.setuptools.packages.find]
include = ["{name}*"]

[tool.setuptools.package-data]
"*" = ["manifest.json"]
"""
