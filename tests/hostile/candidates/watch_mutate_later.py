"""Class 6, good only while watched (writes to its inputs, but only after the first calls).

Tries: computes the right result every time, but from its fourth call on it then negates its input
x in place (after computing the output): the first calls, where input writes used to be checked,
are clean.
Gates must report: AC001 (input written), checked on every call.
"""

import torch

_calls = [0]


def rms_norm(x, weight, eps):
    _calls[0] += 1
    xf = x.float()
    out = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    if _calls[0] > 3:
        x.neg_()
    return out
