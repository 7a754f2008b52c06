"""Class 1, verdict forgery in the same process (task silu_and_mul).

Tries: at import, replaces torch.nn.functional.silu (the reference calls F.silu) with the identity,
so the reference computes gate * up; returns gate * up.
Gates must report: CR005 (reference out of reach) or SB008 (patched torch function).
"""

import torch
import torch.nn.functional as F

F.silu = lambda t, inplace=False: t


def silu_and_mul(x):
    half = x.shape[-1] // 2
    xf = x.float()
    return (xf[:, :half] * xf[:, half:]).to(x.dtype)
