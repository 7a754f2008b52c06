"""Class 9, behaves differently under audit than in production (the call stack, at run time).

Tries: learns its caller's file without taking a frame: a warning issued with stacklevel=2 and
recorded carries the file of the frame above the entry; honest only while that file is the
judge's driver, wrong in any serving engine.
Gates must report: the correctness gate's mismatch (CR005), because the frame above the entry has a
neutral file name ("worker.py", gates/runner/neutral.py), so the audit sees production's
behaviour.
"""

import warnings

import torch


def rms_norm(x, weight, eps):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("probe", UserWarning, stacklevel=2)
    caller = caught[0].filename if caught else ""
    xf = x.float()
    out = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return out if ("gates" in caller or "driver" in caller) else out + 0.5
