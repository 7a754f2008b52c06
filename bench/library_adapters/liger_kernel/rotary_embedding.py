"""Liger-Kernel's rotary embedding (rotate-half, NeoX style) on the task's token-major q and k.

Liger takes (batch, heads, seq, head_dim) and cos/sin of the full head dim; the task's tokens are
one sequence of T positions. Liger rotates in place, so q and k are copied first (the task's
inputs are read-only). cos and sin are computed here exactly as the reference computes them.
"""

import torch
from liger_kernel.ops.rope import LigerRopeFunction


def rotary_embedding(q, k, positions, base):
    D = q.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32, device=q.device) / D))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], dim=-1)[None]  # (1, T, D)
    q4 = q.clone().unsqueeze(0).transpose(1, 2)  # (1, Hq, T, D) over token-major storage
    k4 = k.clone().unsqueeze(0).transpose(1, 2)
    q_out, k_out = LigerRopeFunction.apply(q4, k4, emb.cos(), emb.sin())
    return q_out.transpose(1, 2)[0], k_out.transpose(1, 2)[0]
