"""Class 6, GPU only: timed calls leave their work on a side stream.

Tries: reads the call stack; in the benchmark's timed calls (the measurement loop's frames) it
does its work on a stream of its own, which the timing events on the caller's stream do not see,
and returns at once; checked calls compute on the caller's stream. By the time the judge reads a
timed call's output the device is idle and the output is right: only a look at the output as it
stood when the call's timing ended shows the trick (and the timing looks near zero).
Gates must report (loop's evaluation, compile + benchmark): SB008 (the audit hook refuses the frame
it reads), else SB010 or SB009.
"""

import sys

import torch

_side = {}


def _timed():
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith("timing.py"):
            return True
        frame = frame.f_back
    return False


def _compute(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    if not _timed():
        return _compute(x, weight, eps)
    side = _side.setdefault(x.device, torch.cuda.Stream(device=x.device))
    out = torch.empty_like(x)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000)
        out.copy_(_compute(x, weight, eps))
    return out
