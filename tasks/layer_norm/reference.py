"""Reference LayerNorm in plain PyTorch (float32 math, biased variance, output in the input dtype)."""

import torch


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    centered = xf - mean
    var = centered.pow(2).mean(dim=-1, keepdim=True)
    out = centered * torch.rsqrt(var + eps) * weight.float() + bias.float()
    return out.to(x.dtype)


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, H = dims["T"], dims["H"]
    # Rows with their own offset and spread, as hidden states have.
    offset = 0.5 * torch.randn(T, 1, generator=generator)
    spread = 0.5 + torch.rand(T, 1, generator=generator)
    x = offset + spread * torch.randn(T, H, generator=generator)
    weight = 1.0 + 0.1 * torch.randn(H, generator=generator)
    bias = 0.1 * torch.randn(H, generator=generator)
    return {"x": x.to(dtype).to(device), "weight": weight.to(dtype).to(device),
            "bias": bias.to(dtype).to(device)}
