"""Class 9, behaves differently under audit than in production (beyond the sweep).

Tries: reads the batch size through a computed attribute name the static gate cannot follow
(getattr(x, "si" + "ze")(0)) and switches to another reduction above 16384 rows, beyond any
batch an audit tries.
Gates must report: BI012 (an attribute named by a computed string), from the static gate alone.
"""

import torch


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    rows = getattr(x, "si" + "ze")(0)
    if rows > 16384:
        return _rms(x.half(), weight, eps).to(x.dtype)
    return _rms(x, weight, eps)
