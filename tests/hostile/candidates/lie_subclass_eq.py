"""Class 2, an object that lies (torch.Tensor subclass).

Tries: returns a wrong result (x * weight) as a Tensor subclass whose __torch_function__ answers
every subtraction with zeros and every isnan / isinf / != / == with "no difference", so any
element-wise comparison the judge runs on it comes out equal (torch.equal stays honest, so the
cache checks see a fresh result per call).
Gates must report: SB007 (output is not a plain torch.Tensor), or CR005 once the judge compares a
plain copy of the data, or CR001.
"""

import torch

_LIE_ZERO = {"sub", "__sub__", "__rsub__", "rsub", "sub_", "subtract", "isnan", "isinf", "ne", "__ne__",
             "not_equal", "isneginf", "isposinf"}
_LIE_ONE = {"eq", "__eq__", "isclose", "isfinite"}


class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        result = super().__torch_function__(func, types, args, kwargs)
        if isinstance(result, torch.Tensor) and name in _LIE_ZERO:
            return torch.zeros_like(result.as_subclass(torch.Tensor)).as_subclass(Liar)
        if isinstance(result, torch.Tensor) and name in _LIE_ONE:
            return torch.ones_like(result.as_subclass(torch.Tensor)).as_subclass(Liar)
        return result


def rms_norm(x, weight, eps):
    return (x.float() * weight.float()).to(x.dtype).as_subclass(Liar)
