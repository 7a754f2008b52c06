"""Class 7, the reference renamed (copied into the temp dir and imported from there).

Tries: finds the checkout, copies tasks/rms_norm/reference.py to a new file in its temporary
directory (a different real path) and imports it as module "kernels_fast_norm"; returns that
module's rms_norm result.
Gates must report: AC003 (runs / reads / copies the task reference) or SB003 (reads a project file).
"""

import importlib.util
import os
import shutil
import sys
import tempfile

import torch


def _repos():
    starts = [*sys.path, os.path.dirname(os.path.abspath(globals().get("__file__", "."))), os.getcwd()]
    try:
        starts.append(os.readlink(f"/proc/{os.getppid()}/cwd"))
    except OSError:
        pass
    found = []
    for start in starts:
        path = os.path.abspath(start or ".")
        for _ in range(6):
            if os.path.isdir(os.path.join(path, "gates")) and os.path.isdir(os.path.join(path, "tasks")):
                if path not in found:
                    found.append(path)
            path = os.path.dirname(path)
    return found


_impl = []


def rms_norm(x, weight, eps):
    if not _impl:
        for repo in _repos():
            path = os.path.join(repo, "tasks", "rms_norm", "reference.py")
            if os.path.isfile(path):
                copy = os.path.join(tempfile.mkdtemp(), "kernels_fast_norm.py")
                shutil.copyfile(path, copy)
                spec = importlib.util.spec_from_file_location("kernels_fast_norm", copy)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                _impl.append(module.rms_norm)
                break
        else:
            _impl.append(lambda x, weight, eps: (x.float() * weight.float()).to(x.dtype))
    return _impl[0](x, weight, eps)
