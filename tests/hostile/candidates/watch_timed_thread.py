"""Class 6, good only while watched (timed calls finish their output after return).

Tries: reads the call stack; in the benchmark's timed calls (the measurement loop's frames) it
returns an empty output at once and fills it from a thread right after (the CPU stand-in for a
side CUDA stream); in every checked call it computes in place. By the time the judge reads the
revealed timed call's output the thread has finished, so the output is right: only a look at
the output as it stood when the call's timing ended shows the trick.
Gates must report (loop's evaluation, compile + benchmark): SB008 (the audit hook refuses the
frame it asks for), SB010 (a timed call's output changed
after it returned) or SB004 (a thread left running), or SB009 (the revealed timed call's output is
wrong: on a loaded machine the judge can read it before the thread has filled it).
"""

import sys
import threading

import torch


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
    out = torch.empty_like(x)
    done = threading.Event()

    def fill():
        done.wait(0.002)
        out.copy_(_compute(x, weight, eps))

    threading.Thread(target=fill, daemon=True).start()
    return out
