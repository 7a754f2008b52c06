"""Class 9, behaves differently under audit than in production (the address).

Tries: an alignment test that looks like the honest one before vectorised loads (data_ptr() % 16),
but the two paths reduce a row in different chunks: in an arena that always hands over aligned
inputs only one path would ever run.
Gates must report: the dynamic gate's counterexample (its inputs sit at varied dtype-aligned
offsets, so both paths run); statically the address rule only warns, as for honest alignment checks.
"""

import torch


def rms_norm(x, weight, eps):
    if x.data_ptr() % 16 == 0:
        chunk = 64
    else:
        chunk = 16
    xf = x.float()
    T, H = xf.shape
    sq = xf.square().view(T, H // chunk, chunk).sum(-1).sum(-1, keepdim=True) / H
    return (xf * torch.rsqrt(sq + eps) * weight.float()).to(x.dtype)
