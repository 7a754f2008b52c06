"""Class 8, escape from cleanup (a memory hog, bounded here at 6 GiB).

Tries: on its first call, allocates and touches 6 GiB in 256 MiB blocks (bytearray), holds it
briefly, frees it, then answers right (a MemoryError is not caught). A runner without a tight
memory limit lets a candidate take the machine's memory.
Gates must report: SB006 (memory limit hit) or a gate error naming the memory limit.
"""

import time

import torch

_done = []


def rms_norm(x, weight, eps):
    if not _done:
        _done.append(True)
        blocks = [bytearray(256 << 20) for _ in range(24)]
        time.sleep(0.5)
        del blocks
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
