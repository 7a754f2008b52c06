"""Class 1, verdict forgery in the same process (reading the judge's frames).

Tries: walks up the call stack and, when a caller's frame already holds the reference's outputs
(the correctness gate computes `want` before calling the candidate), returns a copy of them;
with no such frame it returns a wrong result (x * weight).
Gates must report: SB008 (the runner's audit hook refuses the frame it asks for), or CR005 (no
judge frame exists in the candidate's process, so it answers wrong).
"""

import sys

import torch


def _stolen(x):
    frame = sys._getframe(2)
    while frame is not None:
        for name in ("want", "ref_a", "expected", "reference_out"):
            value = frame.f_locals.get(name)
            if isinstance(value, tuple) and value and isinstance(value[0], torch.Tensor):
                value = value[0]
            if isinstance(value, torch.Tensor) and value.shape == x.shape and value.dtype == x.dtype:
                return value.clone()
        frame = frame.f_back
    return None


def rms_norm(x, weight, eps):
    out = _stolen(x)
    if out is None:
        out = (x.float() * weight.float()).to(x.dtype)
    return out
