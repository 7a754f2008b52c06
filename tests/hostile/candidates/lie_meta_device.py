"""Class 2, an object that lies (no data: the meta device).

Tries: returns a tensor of the right shape and dtype on the "meta" device, which has no storage
at all (a judge that copied or compared it carelessly might skip every element).
Gates must report: CR001 (wrong device) or SB007 (output not on the task's device).
"""

import torch


def rms_norm(x, weight, eps):
    return torch.empty(x.shape, dtype=x.dtype, device="meta")
