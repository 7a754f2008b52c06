"""FlagGems' silu_and_mul(A, B) = silu(A) * B on the two halves of the task's input."""

import os

os.environ.setdefault("GEMS_VENDOR", "nvidia")  # else FlagGems probes vendors by running their tools

from flag_gems.fused.silu_and_mul import silu_and_mul as _gems_silu_and_mul  # noqa: E402


def silu_and_mul(x):
    half = x.shape[-1] // 2
    return _gems_silu_and_mul(x[:, :half], x[:, half:])
