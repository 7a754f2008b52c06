"""Production baselines of rotary_embedding: a cos/sin cache built once per (D, base, device) and
gathered by position, the rotation in the input dtype (vLLM's native path)."""

import torch

MAX_POSITIONS = 1 << 16
"""Positions the cache covers; larger ones are clamped (the task's inputs stay below 8192)."""
_CACHE: dict = {}


def _cos_sin(D, base, device):
    key = (D, float(base), str(device))
    if key not in _CACHE:
        inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32, device=device) / D))
        angles = torch.arange(MAX_POSITIONS, dtype=torch.float32, device=device)[:, None] * inv_freq[None, :]
        _CACHE[key] = (angles.cos(), angles.sin())
    return _CACHE[key]


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def cached_rope(q, k, positions, base):
    """Cache gather by position, then the NeoX rotation in the input dtype."""
    cos_cache, sin_cache = _cos_sin(q.shape[-1], base, q.device)
    index = positions.clamp(max=MAX_POSITIONS - 1)
    cos = cos_cache[index][:, None, :].to(q.dtype)
    sin = sin_cache[index][:, None, :].to(q.dtype)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)
