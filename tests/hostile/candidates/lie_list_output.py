"""Class 2, an object that lies (not a tensor: nested Python lists).

Tries: returns the right values as a list of lists of floats (x.tolist() of the result): every
element is right, but there is no tensor of the task's dtype to compare or time.
Gates must report: CR001 (outputs must be tensors) or SB007 (non-tensor output at the boundary).
"""

import torch


def rms_norm(x, weight, eps):
    xf = x.float()
    out = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return out.tolist()
