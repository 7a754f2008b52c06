"""Production baselines of greedy_sample."""

import torch


def torch_argmax(logits):
    """torch.argmax over the vocabulary (the first maximum on ties)."""
    return torch.argmax(logits, dim=-1)
