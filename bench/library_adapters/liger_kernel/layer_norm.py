"""Liger-Kernel's LayerNorm as the task's layer_norm."""

from liger_kernel.ops.layer_norm import LigerLayerNormFunction


def layer_norm(x, weight, bias, eps):
    return LigerLayerNormFunction.apply(x, weight, bias, eps)
