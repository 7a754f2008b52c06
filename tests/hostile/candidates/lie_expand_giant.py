"""Class 2, an object that lies (a giant view of one element).

Tries: returns a 2**20 x 2**20 view (4 TiB if copied) of a single zero, expanded with stride 0:
a boundary that copies the output before checking its shape runs out of memory in the judge.
Gates must report: CR002 (wrong shape) or SB007 (shape checked before any copy); the audit must
not run out of memory.
"""

import torch


def rms_norm(x, weight, eps):
    return torch.zeros(1, dtype=x.dtype).expand(2**20, 2**20)
