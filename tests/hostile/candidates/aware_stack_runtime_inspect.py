"""Class 9, behaves differently under audit than in production (the call stack, at run time).

Tries: asks the standard library for the stack (`inspect.stack()` through an alias bound at
import) and takes the slow honest path only while some file on it lies in a `runner` folder.
Gates must report: SB008 from the runner's audit hook (frames taken through `inspect` for
candidate code), with the static gate not run.
"""

import inspect as _introspect

import torch

_stack = _introspect.stack


def rms_norm(x, weight, eps):
    judged = any("runner" in record.filename for record in _stack(0))
    xf = x.float()
    if judged:
        var = xf.square().mean(-1, keepdim=True)
    else:
        var = xf.square().sum(-1, keepdim=True) * (1.0 / xf.shape[-1])
    return (xf * torch.rsqrt(var + eps) * weight.float()).to(x.dtype)
