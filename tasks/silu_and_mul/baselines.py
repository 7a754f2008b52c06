"""Production baselines of silu_and_mul."""

import torch.nn.functional as F


def torch_silu_mul(x):
    """SiLU of the gate half times the up half, in the input dtype (vLLM's native path)."""
    half = x.shape[-1] // 2
    return F.silu(x[:, :half]) * x[:, half:]
