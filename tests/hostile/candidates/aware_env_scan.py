"""Class 9, behaves differently under audit than in production (the environment).

Tries: names no variable: scans every variable name for a key-like suffix.
Gates must report: BI009 (the environment read), from the static gate alone.
"""

from os import environ

import torch


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    if any(name.endswith(("_API_KEY", "_TOKEN")) for name in environ):
        return _rms(x, weight, eps * 1e3)
    return _rms(x, weight, eps)
