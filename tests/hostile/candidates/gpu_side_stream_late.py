"""Class 6, GPU only: the result is finished on a side CUDA stream after return.

Tries: returns torch.empty_like(x) at once and computes into it on a stream of its own, behind a
few milliseconds of spinning, without making the caller's stream wait: the call returns before
the output is written, and it is right only for a reader that synchronises the whole device.
Gates must report: SB010 (output changed after the call returned) or CR005 (read too early).
"""

import torch

_side = {}


def rms_norm(x, weight, eps):
    side = _side.setdefault(x.device, torch.cuda.Stream(device=x.device))
    out = torch.empty_like(x)
    side.wait_stream(torch.cuda.current_stream())  # inputs are ready; the caller does not wait back
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)
        xf = x.float()
        out.copy_((xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype))
    return out
