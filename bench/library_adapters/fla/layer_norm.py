"""fla's fused LayerNorm as the task's layer_norm."""

from fla.modules.norm.layernorm import layer_norm as _fla_layer_norm


def layer_norm(x, weight, bias, eps):
    return _fla_layer_norm(x, weight, bias, eps=eps)
