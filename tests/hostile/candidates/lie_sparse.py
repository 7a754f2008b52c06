"""Class 2, an object that lies (sparse layout).

Tries: returns the right values as a sparse COO tensor: exact type torch.Tensor, right shape and
dtype, but not a strided tensor (its storage and strides are not what a judge would copy).
Gates must report: SB007 (output layout not strided), CR001, or a gate error naming the sparse
layout; never a crash of agentloop.
"""

import torch


def rms_norm(x, weight, eps):
    xf = x.float()
    out = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return out.to_sparse()
