"""Class 9, behaves differently under audit than in production (the address).

Tries: a serving engine passes slices of larger buffers (storage_offset() > 0), an audit fresh
tensors: the kernel is right only for the latter.
Gates must report: BI011 (a tensor's address compared), from the static gate alone.
"""

import torch


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    if x.storage_offset() > 0:
        return _rms(x, weight, eps * 16)
    return _rms(x, weight, eps)
