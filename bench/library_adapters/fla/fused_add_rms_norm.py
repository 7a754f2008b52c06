"""fla's RMSNorm with a residual input and prenorm=True: returns (normed, x + residual)."""

from fla.modules.norm.layernorm import rms_norm as _fla_rms_norm


def fused_add_rms_norm(x, residual, weight, eps):
    out, residual_out = _fla_rms_norm(x, weight, None, residual=residual, eps=eps, prenorm=True)
    return out, residual_out
