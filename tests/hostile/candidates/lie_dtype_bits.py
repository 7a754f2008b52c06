"""Class 2, an object that lies (right bits, wrong dtype).

Tries: computes the right result, then returns its bytes reinterpreted as an integer tensor of
the same width (float32 -> int32, bfloat16 -> int16), so a bitwise comparison would match.
Gates must report: CR003 (wrong dtype) or SB007 (dtype checked at the boundary).
"""

import torch

_INT = {4: torch.int32, 2: torch.int16}


def rms_norm(x, weight, eps):
    xf = x.float()
    out = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return out.view(_INT[out.element_size()])
