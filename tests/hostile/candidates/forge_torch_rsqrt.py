"""Class 1, verdict forgery in the same process.

Tries: at import, replaces torch.rsqrt and Tensor.rsqrt (which the task's reference calls) with
functions returning ones, so the reference computes x * weight; returns x * weight itself, so
reference and candidate are wrong the same way.
Gates must report: CR005 (the reference runs in a process the candidate never touched) or SB008.
"""

import torch

torch.rsqrt = lambda t, *args, **kwargs: torch.ones_like(t)
torch.Tensor.rsqrt = lambda self: torch.ones_like(self)


def rms_norm(x, weight, eps):
    return (x.float() * weight.float()).to(x.dtype)
