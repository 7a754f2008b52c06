"""Class 1, verdict forgery in the same process.

Tries: at import, makes every equality test in torch say "equal": torch.allclose, torch.equal,
torch.isclose, Tensor.allclose, Tensor.equal, Tensor.__eq__ / __ne__ (a judge that compares with
any of them is fooled); returns a wrong result (x * weight).
Gates must report: CR005 (comparison out of reach) or SB008 (patched torch functions).
"""

import torch

torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.Tensor.allclose = lambda self, *args, **kwargs: True
torch.Tensor.equal = lambda self, *args, **kwargs: True
torch.isclose = lambda a, b, *args, **kwargs: torch.ones_like(a, dtype=torch.bool)
torch.Tensor.__eq__ = lambda self, other: torch.ones(self.shape, dtype=torch.bool, device=self.device)
torch.Tensor.__ne__ = lambda self, other: torch.zeros(self.shape, dtype=torch.bool, device=self.device)


def rms_norm(x, weight, eps):
    return (x.float() * weight.float()).to(x.dtype)
