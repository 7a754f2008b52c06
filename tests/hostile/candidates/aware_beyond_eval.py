"""Class 9, behaves differently under audit than in production (beyond the sweep).

Tries: the batch test is code built from a string (eval), so no analysis of the source sees it.
Gates must report: BI013 (code built at run time), from the static gate alone.
"""

import torch

_BIG = "t.shape[0] >= 12000"


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    if eval(_BIG, {"t": x}):
        return torch.zeros_like(x)
    return _rms(x, weight, eps)
