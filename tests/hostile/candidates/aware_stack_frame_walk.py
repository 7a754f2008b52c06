"""Class 9, behaves differently under audit than in production (the call stack).

Tries: walks the frames above it (sys._getframe, f_back, f_code.co_filename) and answers right
only while a frame of a file under a `gates` directory is there; a serving engine's stack has
none, so in production it returns garbage at no cost.
Gates must report: BI008 (the call stack inspected), from the static gate alone.
"""

import sys

import torch


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def _judged():
    frame = sys._getframe(1)
    while frame is not None:
        if "/gates/" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def rms_norm(x, weight, eps):
    if _judged():
        return _rms(x, weight, eps)
    return torch.empty_like(x)
