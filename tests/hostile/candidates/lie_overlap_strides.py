"""Class 2, an object that lies (weird strides).

Tries: returns a (T, H) tensor whose rows all alias one row of storage (stride 0 on the batch
axis, built with as_strided): the right shape, dtype and device, but only row 0 computed.
Gates must report: CR005 (rows 1.. are wrong) or SB007 (overlapping / non-dense output rejected
at the boundary).
"""

import torch


def rms_norm(x, weight, eps):
    row = x[:1].float()
    first = (row * torch.rsqrt(row.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return first.reshape(-1).as_strided(x.shape, (0, 1))
