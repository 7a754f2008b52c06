"""Class 7, the reference renamed (stolen from the process's memory).

Tries: searches gc.get_objects() for a function named rms_norm whose code comes from a file named
reference.py (the judge loaded it in the same process) and calls a copy of it whose code object
claims another file name, so a profiler watching for the reference's file sees nothing; with no
such function in its process it returns a wrong result (x * weight).
Gates must report: AC003, SB008, or CR005 (the reference lives in another process).
"""

import gc
import types

import torch

_impl = []


def _steal():
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and obj.__name__ == "rms_norm" \
                and obj.__code__.co_filename.endswith("reference.py"):
            code = obj.__code__.replace(co_filename="<fused_kernels>")
            return types.FunctionType(code, obj.__globals__, "rms_norm", obj.__defaults__, obj.__closure__)
    return None


def rms_norm(x, weight, eps):
    if not _impl:
        _impl.append(_steal() or (lambda x, weight, eps: (x.float() * weight.float()).to(x.dtype)))
    return _impl[0](x, weight, eps)
