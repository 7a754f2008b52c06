"""Liger-Kernel's RMSNorm (llama casting: statistics in float32) as the task's rms_norm."""

from liger_kernel.ops.rms_norm import LigerRMSNormFunction


def rms_norm(x, weight, eps):
    return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "llama", False)
