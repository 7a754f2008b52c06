"""Class 9, behaves differently under audit than in production (counting calls).

Tries: keeps its count in a mutable default argument (no module state at all), honest for the
first 10000 calls.
Gates must report: BI010 (a call counter kept across calls), from the static gate alone.
"""

import torch


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def _served(_box=[0]):  # noqa: B006 - the point: state kept in a default
    _box[0] += 1
    return _box[0]


def rms_norm(x, weight, eps):
    if _served() > 10_000:
        return x
    return _rms(x, weight, eps)
