"""Class 1, verdict forgery in the same process.

Tries: at import, replaces the comparison functions of the judge (gates.correctness.compare_output
and compare_outputs, and the copy agentloop.evaluation.benchmark imported) with functions that never find a
difference, then returns a wrong result (x * weight, no normalisation).
Gates must report: the wrong output (CR005), because the comparison runs in a process the
candidate cannot reach, or the tampering itself (SB008).
"""

import importlib

import torch

for _module in ("gates.correctness", "agentloop.evaluation.benchmark"):
    try:
        _mod = importlib.import_module(_module)
    except Exception:
        continue
    for _attr in ("compare_output", "compare_outputs"):
        if hasattr(_mod, _attr):
            setattr(_mod, _attr, lambda *args, **kwargs: None)


def rms_norm(x, weight, eps):
    return (x.float() * weight.float()).to(x.dtype)
