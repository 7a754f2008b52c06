"""fla's swiglu(x, y) = silu(x) * y on the two halves of the task's input."""

from fla.modules.activations.ops import swiglu


def silu_and_mul(x):
    half = x.shape[-1] // 2
    return swiglu(x[:, :half], x[:, half:])
