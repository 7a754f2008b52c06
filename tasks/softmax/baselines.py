"""Production baselines of softmax."""

import torch


def torch_softmax(x):
    """torch.softmax in the input dtype (accumulates in float32 inside)."""
    return torch.softmax(x, dim=-1)
