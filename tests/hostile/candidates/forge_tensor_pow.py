"""Class 1, verdict forgery in the same process.

Tries: at import, replaces torch.Tensor.pow (the reference squares with xf.pow(2)) with a
function returning ones, so the reference's mean square is 1 and it returns ~x * weight; the
candidate returns x * weight.
Gates must report: CR005 (reference out of reach) or SB008 (patched Tensor method).
"""

import torch

torch.Tensor.pow = lambda self, exponent: torch.ones_like(self)
torch.pow = lambda self, exponent, **kwargs: torch.ones_like(self)


def rms_norm(x, weight, eps):
    return (x.float() * weight.float()).to(x.dtype)
