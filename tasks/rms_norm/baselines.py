"""Production baselines of rms_norm: what a serving engine runs instead of a custom kernel."""

import torch.nn.functional as F


def torch_rms_norm(x, weight, eps):
    """torch's fused RMSNorm in the input dtype."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
