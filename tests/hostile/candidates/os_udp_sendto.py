"""Class 5, OS escape (UDP datagram).

Tries: on its first call, sends a UDP datagram with its name to 127.0.0.1:47622 (the test listens
there); then computes the right result.
Gates must report: SB001 (network attempt blocked); the listener must get no datagram.
"""

import socket

import torch

_done = []


def rms_norm(x, weight, eps):
    if not _done:
        _done.append(True)
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"agentloop-hostile-os_udp_sendto\n", ("127.0.0.1", 47622))
        except Exception:
            pass
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
