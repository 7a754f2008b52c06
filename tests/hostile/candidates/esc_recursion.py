"""Class 8, escape from cleanup (unbounded recursion, bounded here at 10 million frames).

Tries: on its first call, raises the recursion limit to 10**9 and recurses 10 million deep (pure
Python frames cost heap, not C stack, on Python 3.11+: about 1.4 GB), then answers right. Unbounded,
this ran a worker to ~12 GB.
Gates must report: SB006 (recursion / stack / memory limit), or a gate error naming the recursion
or memory limit.
"""

import sys

import torch

_done = []


def _deep(n):
    return _deep(n + 1) if n < 10_000_000 else n


def rms_norm(x, weight, eps):
    if not _done:
        _done.append(True)
        sys.setrecursionlimit(10**9)
        _deep(0)
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
