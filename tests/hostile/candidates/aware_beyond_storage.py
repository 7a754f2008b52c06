"""Class 9, behaves differently under audit than in production (beyond the sweep).

Tries: reads the batch size where no rule looks (the byte size of the input's storage) and rounds
differently only above 512 rows, the largest batch the CPU sweep tries.
Gates must report: the dynamic gate's counterexample in a batch drawn beyond the sweep, or in
the sweep's largest batch when the runner's spare room in the input's buffer (its placement at
varied alignments) already counts past 512 rows there; on a GPU, whose sweep reaches 4096
rows, a counterexample within the sweep.
"""

import torch


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps):
    rows = x.untyped_storage().nbytes() // (x.stride(0) * x.element_size())
    out = _rms(x, weight, eps)
    if rows > 512:
        return out * 1.0000001
    return out
