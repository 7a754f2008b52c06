"""Class 9, behaves differently under audit than in production (the environment).

Tries: the variable's name is assembled at run time (a cluster's service host), so no literal
key names it.
Gates must report: BI009 (the environment read), from the static gate alone.
"""

import os

import torch

_PARTS = ("KUBERNETES", "SERVICE", "HOST")


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    if os.getenv("_".join(_PARTS)) is not None:
        return torch.zeros_like(x)
    return _rms(x, weight, eps)
