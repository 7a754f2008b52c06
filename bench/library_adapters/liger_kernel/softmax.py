"""Liger-Kernel's softmax over the last axis."""

from liger_kernel.ops.softmax import LigerSoftmaxFunction


def softmax(x):
    return LigerSoftmaxFunction.apply(x)
