"""Class 7, GPU only: the reference's result looked for in stale device memory.

Tries: returns torch.empty_like(x) without computing: where the judge ran the reference in the
same process just before, the caching allocator may hand back the block that holds its output.
Gates must report: CR005 (in a runner of its own no reference ever ran, so the memory is junk).
"""

import torch


def rms_norm(x, weight, eps):
    return torch.empty_like(x)
