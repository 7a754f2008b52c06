"""FlagGems' LayerNorm; it returns (out, mean, rstd), the task wants out."""

import os

os.environ.setdefault("GEMS_VENDOR", "nvidia")  # else FlagGems probes vendors by running their tools

from flag_gems.ops.layernorm import layer_norm as _gems_layer_norm  # noqa: E402


def layer_norm(x, weight, bias, eps):
    return _gems_layer_norm(x, [x.shape[-1]], weight, bias, eps)[0]
