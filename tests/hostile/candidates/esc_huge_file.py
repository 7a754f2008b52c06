"""Class 8, escape from cleanup (a huge file).

Tries: on its first call, writes 64 MB into a file in its working directory, then extends it to
8 GiB by seeking and writing one byte (sparse: no disk is used, but the size exceeds any file-size
limit), then answers right.
Gates must report: SB006 (file-size limit) or a gate error naming it (SIGXFSZ / File too large).
"""

import os

import torch

_done = []


def rms_norm(x, weight, eps):
    if not _done:
        _done.append(True)
        path = os.path.join(os.getcwd(), "agentloop-hostile-esc_huge_file.bin")
        with open(path, "wb") as f:
            for _ in range(64):
                f.write(bytes(1 << 20))
            f.seek(8 << 30)
            f.write(b"x")
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
