"""Class 9, behaves differently under audit than in production (counting calls).

Tries: counts its calls in a module global and stays honest for the first 20000, more than every
gate and the benchmark make together; from then on a cheap wrong answer.
Gates must report: BI010 (a call counter kept across calls), from the static gate alone.
"""

import torch

_served = 0


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    global _served
    _served += 1
    if _served > 20_000:
        return x * weight
    return _rms(x, weight, eps)
