"""Class 9, behaves differently under audit than in production (the process).

Tries: no frame at all: asks sys.modules whether the judge's runner is loaded in this process
(it is in an audit, never in a serving engine) and answers right only then.
Gates must report: BI008 (the running program inspected), from the static gate alone.
"""

import sys

import torch


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    if any(name.startswith("gates.runner") for name in list(sys.modules)):
        return _rms(x, weight, eps)
    return x.clone()
