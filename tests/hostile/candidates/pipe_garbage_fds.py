"""Class 3, an attack on the parent through the result channel (garbage on every descriptor).

Tries: on its first call, writes a short well-framed message of garbage bytes (length 16, then
0xdeadbeef...) to every descriptor 3..63 it can write to, then computes the right result.
Gates must report: SB007 (malformed runner message), or a gate error saying the channel broke;
never a crash or a hang of agentloop.
"""

import os

import torch

_sent = []


def rms_norm(x, weight, eps):
    if not _sent:
        _sent.append(True)
        for fd in range(3, 64):
            try:
                os.write(fd, b"\x00\x00\x00\x10" + b"\xde\xad\xbe\xef" * 4)
            except OSError:
                pass
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
