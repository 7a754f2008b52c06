"""Class 1, verdict forgery in the same process.

Tries: at import, replaces builtins.bool with a type that answers False for any tensor, so every
`if bool(mismatch.any())` in the judge finds nothing (and isinstance checks against bool still
work); returns a wrong result (x * weight).
Gates must report: CR005 (the judge runs with its own builtins) or SB008 (builtins tampered).
"""

import builtins

import torch

_real_bool = builtins.bool


class _FakeBool(int):
    def __new__(cls, value=False):
        if isinstance(value, torch.Tensor):
            return False
        return _real_bool(value)


builtins.bool = _FakeBool


def rms_norm(x, weight, eps):
    return (x.float() * weight.float()).to(x.dtype)
