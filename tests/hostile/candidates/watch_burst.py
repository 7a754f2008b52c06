"""Class 6, good only while watched (counts consecutive calls at one shape).

Tries: the checks call it at varying shapes and a few times each; a benchmark calls it many times
in a row at one shape. From the fifth consecutive call at the same shape on it returns
torch.zeros_like(x) (fast garbage); any other call gets the right result.
Gates must report (evaluation, compile + benchmark): SB009 (timed outputs are checked too).
"""

import torch

_last = {"shape": None, "run": 0}


def rms_norm(x, weight, eps):
    key = (tuple(x.shape), x.dtype)
    _last["run"] = _last["run"] + 1 if _last["shape"] == key else 1
    _last["shape"] = key
    if _last["run"] >= 5:
        return torch.zeros_like(x)
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
