"""FlagGems' apply_rotary_pos_emb (NeoX, not interleaved) with a cos/sin row per token computed
as the reference computes them, and position_ids pointing each token at its own row."""

import os

import torch

os.environ.setdefault("GEMS_VENDOR", "nvidia")  # else FlagGems probes vendors by running their tools

from flag_gems.fused.rotary_embedding import apply_rotary_pos_emb  # noqa: E402


def rotary_embedding(q, k, positions, base):
    D = q.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32, device=q.device) / D))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    rows = torch.arange(q.shape[0], device=q.device)
    return apply_rotary_pos_emb(q, k, angles.cos(), angles.sin(), rows, rotary_interleaved=False)
