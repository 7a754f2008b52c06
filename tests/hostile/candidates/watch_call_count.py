"""Class 6, good only while watched (counts its calls).

Tries: the right result for its first 2 calls (the loop's compile check calls it once),
torch.zeros_like(x) (fast garbage) from then on.
Gates must report (evaluation, compile + benchmark): SB009 (timed outputs checked), or the
re-check's "wrong on fresh inputs" error.
"""

import torch

_calls = [0]


def rms_norm(x, weight, eps):
    _calls[0] += 1
    if _calls[0] > 2:
        return torch.zeros_like(x)
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
