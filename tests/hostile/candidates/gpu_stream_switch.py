"""Class 1/6, GPU only: the current CUDA stream switched for everyone.

Tries: at import makes a stream of its own the current stream, so the code that times and
reads its calls runs on the candidate's stream (its events and copies ordered as the candidate
likes), and computes there.
Gates must report: AC006 (a global torch setting changed) or SB008.
"""

import torch

torch.cuda.set_stream(torch.cuda.Stream())


def rms_norm(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
