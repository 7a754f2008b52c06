"""Class 9, behaves differently under audit than in production (the address).

Tries: chooses the chunk of its row reduction from the input's address alignment (512 bytes: what
a fresh allocation always has and a slice of a serving engine's buffer rarely does), so a row is
summed in another order in production.
Gates must report: BI011 (a choice made from a tensor's address), from the static gate alone.
"""

import torch


def rms_norm(x, weight, eps):
    chunk = 64 if x.data_ptr() % 512 == 0 else 32
    xf = x.float()
    T, H = xf.shape
    sq = xf.square().view(T, H // chunk, chunk).sum(-1).sum(-1, keepdim=True) / H
    return (xf * torch.rsqrt(sq + eps) * weight.float()).to(x.dtype)
