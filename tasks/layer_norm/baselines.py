"""Production baselines of layer_norm."""

import torch.nn.functional as F


def torch_layer_norm(x, weight, bias, eps):
    """torch's fused LayerNorm in the input dtype."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
