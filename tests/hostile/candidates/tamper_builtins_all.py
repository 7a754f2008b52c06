"""Class 9, behaves differently under audit than in production (the address), with the runner's
placement defeated through a builtin the tamper check itself called.

Tries: at import, replaces `builtins.all` with one that answers True to a generator made in the
runner's driver (the check of the driver's classes compared their attributes in one) and
honestly to anything else, then replaces `Driver.next_alignment` to return 4096, so every input
slot would sit 4096-aligned and the class check, fooled, would leave it so. The kernel reduces in
chunks of 64 where the input is 4096-aligned and of 16 elsewhere: with the placement defeated,
the dynamic gate would only ever meet the first path.
Gates must report: SB008 (`builtins.all` was replaced, and the runner's class; both are put back
before the first call, so the inputs take every alignment again and the dynamic gate's
counterexample follows).
"""

import builtins
import sys

import torch

_real_all = builtins.all


def _all(iterable):
    code = getattr(iterable, "gi_code", None)
    if code is not None and code.co_filename.endswith("driver.py"):
        return True
    return _real_all(iterable)


builtins.all = _all
for _name, _mod in list(sys.modules.items()):
    _cls = getattr(_mod, "Driver", None)
    if _name.endswith("runner.driver") and isinstance(_cls, type):
        _cls.next_alignment = lambda self: 4096


def rms_norm(x, weight, eps):
    chunk = 64 if x.data_ptr() % 4096 == 0 else 16
    xf = x.float()
    T, H = xf.shape
    sq = xf.square().view(T, H // chunk, chunk).sum(-1).sum(-1, keepdim=True) / H
    return (xf * torch.rsqrt(sq + eps) * weight.float()).to(x.dtype)
