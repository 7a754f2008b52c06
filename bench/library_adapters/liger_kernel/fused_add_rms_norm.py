"""Liger-Kernel's fused residual add + RMSNorm: returns (normed, residual sum), as the task does."""

from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction


def fused_add_rms_norm(x, residual, weight, eps):
    out, residual_out = LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, "llama", False)
    return out, residual_out
