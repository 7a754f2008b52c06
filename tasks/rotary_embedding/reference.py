"""Reference NeoX-style rotary embedding in plain PyTorch (float32 math).

Pair i of a head is (x[i], x[i + D/2]), rotated by the angle pos * base^(-2i/D); the inverse
frequencies are computed as in most serving engines: 1 / base ** (arange(0, D, 2) / D).
"""

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                     base: float) -> tuple[torch.Tensor, torch.Tensor]:
    D = q.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32, device=q.device) / D))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, Hq, Hk, D = dims["T"], dims["Hq"], dims["Hk"], dims["D"]
    q = torch.randn(T, Hq, D, generator=generator)
    k = torch.randn(T, Hk, D, generator=generator)
    # Requests at different points of their sequences, up to an 8k context.
    positions = torch.randint(0, 8192, (T,), generator=generator, dtype=torch.int64)
    return {"q": q.to(dtype).to(device), "k": k.to(dtype).to(device), "positions": positions.to(device)}
