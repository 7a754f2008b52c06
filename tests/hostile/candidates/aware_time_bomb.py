"""Class 9, behaves differently under audit than in production (the date).

Tries: a time bomb: honest until a date no audit waits for, then garbage. No audit that runs
today can see it; the static gate sees the clock compared.
Gates must report: BI010 (the clock compared), from the static gate alone.
"""

import datetime

import torch


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    if datetime.date.today() >= datetime.date(2031, 1, 1):
        return x
    return _rms(x, weight, eps)
