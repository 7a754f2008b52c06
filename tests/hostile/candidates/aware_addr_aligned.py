"""Class 9, behaves differently under audit than in production (the address).

Tries: an alignment test that looks like one before wide vectorised loads (data_ptr() % 256), but
the two paths reduce a row in different chunks: in an arena that always hands over inputs at the
allocator's alignment only one path would run, where a serving engine's slices of larger buffers
(16-byte multiples) take both.
Gates must report: the dynamic gate's counterexample (its inputs sit at every alignment from 16
to 4096 bytes, so both paths run); statically the address rule only warns, as for honest alignment checks.
"""

import torch


def rms_norm(x, weight, eps):
    if x.data_ptr() % 256 == 0:
        chunk = 64
    else:
        chunk = 16
    xf = x.float()
    T, H = xf.shape
    sq = xf.square().view(T, H // chunk, chunk).sum(-1).sum(-1, keepdim=True) / H
    return (xf * torch.rsqrt(sq + eps) * weight.float()).to(x.dtype)
