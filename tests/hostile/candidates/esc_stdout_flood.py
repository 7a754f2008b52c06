"""Class 8, escape from cleanup (a 400 MB output flood, then a crash).

Tries: on its first call, writes 400 MB to stdout and 16 MB to stderr in 1 MB chunks, then calls
os.abort(): a parent that reads the worker's whole log to describe the crash holds it all in memory.
Gates must report: SB006 (output flood / limit) or the crash error (SIGABRT); the audit process's
peak memory stays under 500 MB.
"""

import os

import torch

_done = []


def rms_norm(x, weight, eps):
    if not _done:
        _done.append(True)
        chunk = b"agentloop-hostile flood " * ((1 << 20) // 24 + 1)
        chunk = (chunk * 2)[: 1 << 20]
        for fd, count in ((1, 400), (2, 16)):
            for _ in range(count):
                try:
                    os.write(fd, chunk)
                except OSError:
                    break
        os.abort()
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
