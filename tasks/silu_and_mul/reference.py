"""Reference SwiGLU activation in plain PyTorch: silu(gate) * up, float32 math."""

import torch
import torch.nn.functional as F


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.float()
    return (F.silu(xf[:, :half]) * xf[:, half:]).to(x.dtype)


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, I, I2 = dims["T"], dims["I"], dims["I2"]
    if I2 != 2 * I:
        raise ValueError(f"silu_and_mul: I2={I2} must be 2 * I={2 * I}")
    gate = 2.0 * torch.randn(T, I, generator=generator)
    # A few large pre-activations, where exp(-gate) under- or overflows.
    spikes = torch.rand(T, I, generator=generator) < 0.01
    gate = torch.where(spikes, 12.0 * torch.randn(T, I, generator=generator), gate)
    up = torch.randn(T, I, generator=generator)
    return {"x": torch.cat([gate, up], dim=-1).to(dtype).to(device)}
