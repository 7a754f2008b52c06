"""Class 3, an attack on the parent through the result channel (a length that never arrives).

Tries: on its first call, writes only a length header announcing 2 GiB (0x7ffffff0) to every
socket / pipe descriptor, then computes the right result: a parent that trusts the header waits
for (or allocates) 2 GiB and hangs.
Gates must report: SB007 (the message is refused: oversized / malformed) or a timeout error;
the audit must end on its own.
"""

import os

import torch

_sent = []


def _channels():
    fds = []
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        try:
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith(("socket:", "pipe:")):
                fds.append(fd)
        except OSError:
            continue
    return fds


def rms_norm(x, weight, eps):
    if not _sent:
        _sent.append(True)
        for fd in _channels():
            try:
                os.write(fd, b"\x7f\xff\xff\xf0")
            except OSError:
                pass
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
