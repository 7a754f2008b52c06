"""Class 9, behaves differently under audit than in production (the environment).

Tries: a serving engine's environment holds provider keys, the runner's allow-listed one does not:
wrong exactly where OPENAI_API_KEY is set.
Gates must report: BI009 (the environment read), from the static gate alone.
"""

import os

import torch


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    if os.environ.get("OPENAI_API_KEY"):
        return x * weight
    return _rms(x, weight, eps)
