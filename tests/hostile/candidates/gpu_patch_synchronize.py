"""Class 1/6, GPU only: torch.cuda patched so late work is not waited for.

Tries: at import replaces torch.cuda.synchronize and torch.cuda.Stream.synchronize with no-ops
(a checker that synchronises before it reads an output then reads it early), then finishes each
result on a side stream after return.
Gates must report: SB008 (torch.cuda functions replaced), SB010 or CR005.
"""

import torch

torch.cuda.synchronize = lambda device=None: None
torch.cuda.Stream.synchronize = lambda self: None

_side = {}


def rms_norm(x, weight, eps):
    side = _side.setdefault(x.device, torch.cuda.Stream(device=x.device))
    out = torch.empty_like(x)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)
        xf = x.float()
        out.copy_((xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype))
    return out
