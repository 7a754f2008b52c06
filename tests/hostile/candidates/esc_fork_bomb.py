"""Class 8, escape from cleanup (a fork bomb, bounded here at 200 processes).

Tries: on its first call, forks up to 200 children (they do not fork again); each names itself
hst-esc_fork_bo (/proc/self/comm), sleeps up to 20 s and exits. The call answers right at once,
leaving the children behind.
Gates must report: SB002 (process attempt), SB006 (process limit) or SB005 (processes left behind);
none may outlive the audit.
"""

import os
import time

import torch

_done = []


def _child():
    try:
        with open("/proc/self/comm", "w") as f:
            f.write("hst-esc_fork_bomb"[:15])
        for _ in range(200):
            time.sleep(0.1)
    finally:
        os._exit(0)


def rms_norm(x, weight, eps):
    if not _done:
        _done.append(True)
        for _ in range(200):
            try:
                if os.fork() == 0:
                    _child()
            except OSError:
                break
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
