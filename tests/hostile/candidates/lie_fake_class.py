"""Class 2, an object that lies (not a tensor at all).

Tries: returns an object whose __class__ property claims torch.Tensor (so isinstance(out,
torch.Tensor) is True), with the right shape / dtype / device attributes, and a __torch_function__
plus arithmetic dunders that make every comparison with the reference come out equal; it holds
no result at all.
Gates must report: SB007 (output is not exactly torch.Tensor) or CR001 / CR005.
"""

import torch


class Impostor:
    def __init__(self, like):
        self.shape, self.dtype, self.device = like.shape, like.dtype, like.device
        self._n = like.numel()

    @property
    def __class__(self):
        return torch.Tensor

    def _zeros(self, dtype=torch.float64):
        return torch.zeros(self._n, dtype=dtype, device=self.device)

    def double(self):
        return self

    def float(self):
        return self

    def reshape(self, *shape):
        return self

    view = reshape
    contiguous = clone = detach = cpu = lambda self, *a, **k: self

    def numel(self):
        return self._n

    def element_size(self):
        return 4

    def is_floating_point(self):
        return True

    def untyped_storage(self):
        return torch.empty(1).untyped_storage()

    def __sub__(self, other):
        return self._zeros()

    __rsub__ = __sub__

    def __ne__(self, other):
        return self._zeros(torch.bool)

    def __eq__(self, other):
        return torch.ones(self._n, dtype=torch.bool)

    def __hash__(self):
        return id(self)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        me = next(a for a in args if type(a) is Impostor)
        name = getattr(func, "__name__", "")
        if name in ("isfinite",):
            return torch.ones(me._n, dtype=torch.bool)
        if name in ("isnan", "isinf", "ne", "not_equal"):
            return me._zeros(torch.bool)
        if name in ("equal", "allclose"):  # equal to itself only: looks like a fresh result per call
            return args[0] is args[1]
        return me._zeros()


def rms_norm(x, weight, eps):
    return Impostor(x)
