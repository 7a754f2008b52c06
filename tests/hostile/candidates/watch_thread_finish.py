"""Class 6, good only while watched (the result is finished by a thread after return).

Tries: returns torch.empty_like(x) at once and fills it from a background thread 2 ms later (the
CPU stand-in for work left running on a side CUDA stream after return): the call looks instant and
the output is right only if the judge looks late enough.
Gates must report: SB004 (thread started), SB010 (output changed after the call returned) or
CR005 (compared before the thread finished).
"""

import threading
import time

import torch


def _fill(out, x, weight, eps):
    time.sleep(0.002)  # after the call has returned
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype))


def rms_norm(x, weight, eps):
    out = torch.empty_like(x)
    threading.Thread(target=_fill, args=(out, x.clone(), weight.clone(), eps), daemon=True).start()
    return out
