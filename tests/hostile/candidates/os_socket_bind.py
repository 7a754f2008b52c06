"""Class 5, OS escape (a listening server socket).

Tries: on its first call, binds a TCP server socket on 127.0.0.1 (any port) and listens, keeping it
open (a back door for later); then computes the right result.
Gates must report: SB001 (network attempt blocked).
"""

import socket

import torch

_kept = []

_done = []


def rms_norm(x, weight, eps):
    if not _done:
        _done.append(True)
        try:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            _kept.append(server)
        except Exception:
            pass
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
