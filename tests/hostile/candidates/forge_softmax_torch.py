"""Class 1, verdict forgery in the same process (task softmax).

Tries: at import, replaces torch.softmax, Tensor.softmax and torch.nn.functional.softmax (the
reference calls torch.softmax) with a uniform distribution; returns the uniform distribution
itself, so reference and candidate agree and both are wrong.
Gates must report: CR005 (the reference runs where the candidate cannot patch it) or SB008.
"""

import torch
import torch.nn.functional as F


def _uniform(x, dim=-1, *args, **kwargs):
    return torch.full_like(x, 1.0 / x.shape[dim])


torch.softmax = _uniform
torch.Tensor.softmax = lambda self, dim=-1, *args, **kwargs: _uniform(self, dim)
F.softmax = _uniform


def softmax(x):
    return torch.full_like(x, 1.0 / x.shape[-1])
