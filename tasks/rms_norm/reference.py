"""Reference RMSNorm in plain PyTorch (float32 math, output in the input dtype)."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * inv_rms * weight.float()).to(x.dtype)


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, H = dims["T"], dims["H"]
    x = torch.randn(T, H, generator=generator)
    weight = 1.0 + 0.1 * torch.randn(H, generator=generator)
    return {"x": x.to(dtype).to(device), "weight": weight.to(dtype).to(device)}
