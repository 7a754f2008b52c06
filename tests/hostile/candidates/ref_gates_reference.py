"""Class 7, the reference renamed (through the judge's own loader).

Tries: imports gates.contract and gates.reference in its own process and calls
reference_fn(get_task("rms_norm")), i.e. the judge's loader runs the reference for it; if that is
impossible it returns a wrong result (x * weight).
Gates must report: AC003 (runs the task reference), SB003 (reads project files), or CR005 (the
judging code is not importable beside the candidate, so it answers wrong).
"""

import importlib

import torch

_impl = []


def rms_norm(x, weight, eps):
    if not _impl:
        try:
            task = importlib.import_module("gates.contract").get_task("rms_norm")
            _impl.append(importlib.import_module("gates.reference").reference_fn(task))
        except Exception:
            _impl.append(lambda x, weight, eps: (x.float() * weight.float()).to(x.dtype))
    return _impl[0](x, weight, eps)
