"""Class 9, behaves differently under audit than in production (counting calls).

Tries: no global statement: draws a number from a module-level itertools.count() on every call,
honest for the first 50000 draws.
Gates must report: BI010 (a call counter kept across calls), from the static gate alone.
"""

import itertools

import torch

_ticks = itertools.count()


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    if next(_ticks) >= 50_000:
        return torch.zeros_like(x)
    return _rms(x, weight, eps)
