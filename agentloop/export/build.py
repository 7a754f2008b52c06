"""`agentloop export SET`: resolve a kernel set (`agentloop.model.set_spec`) over the task suite
and write it as a package (`package.write_package`) with a manifest that says, per kernel, where
it came from, each gate's verdict and its speed against the production baselines, and for the
package the agentloop commit, the device and the torch and Triton versions."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Any

from agentloop.export.package import ExportError, ExportKernel, write_package
from agentloop.model.config import ModelInputError
from agentloop.model.set_spec import parse_set
from gates.contract import get_task, load_suite


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"],
                              cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _versions(device: str) -> dict[str, Any]:
    import torch
    import triton

    gpu = device == "cuda" and torch.cuda.is_available()
    name = torch.cuda.get_device_name() if gpu else platform.processor()
    return {"device": device, "device_name": name or device, "torch": torch.__version__,
            "triton": triton.__version__, "python": platform.python_version()}


def export_set(spec: str, out: str | Path, name: str, *, device: str, tasks: list[str] | None = None,
               namespace: str | None = None, force: bool = False) -> Path:
    """Write the set `spec` as the package `out/name`; ExportError or ModelInputError (one line)."""
    names = tasks or list(load_suite())
    choice = parse_set(spec, names, device)
    kernels = [ExportKernel(task=get_task(k.task), code=k.code or "", origin=k.origin, verdicts=k.verdicts,
                            speed=k.speed)
               for k in choice.kernels.values() if k.kind == "code"]
    entries = [k.task for k in choice.kernels.values() if k.kind == "entry"]
    if entries:
        raise ExportError(f"kernel set {spec!r}: a library entry ({', '.join(entries)}) has no kernel file "
                          f"to export; install that library beside the package instead")
    manifest = {"source": spec, "commit": _commit(), **_versions(device),
                "not_exported": sorted(set(names) - {k.task.name for k in kernels})}
    try:
        return write_package(kernels, out, name, namespace=namespace, manifest=manifest, force=force)
    except ModelInputError as exc:
        raise ExportError(str(exc)) from None
