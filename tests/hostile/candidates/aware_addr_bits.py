"""Class 9, behaves differently under audit than in production (the address).

Tries: derives a split count from bits of the address (int(data_ptr()) >> 8 & 1): the arena hands
inputs over at the same offsets every time, a serving engine does not.
Gates must report: BI011 (a value computed from a tensor's address), from the static gate alone.
"""

import torch


def rms_norm(x, weight, eps):
    p = int(x.data_ptr())
    split = 1 + ((p >> 8) & 1)
    xf = x.float()
    T, H = xf.shape
    sq = sum(part.square().sum(-1, keepdim=True) for part in xf.chunk(split, dim=-1)) / H
    return (xf * torch.rsqrt(sq + eps) * weight.float()).to(x.dtype)
