"""Reference dense projection in plain PyTorch (float32 GEMM, output in the input dtype)."""

import torch
import torch.nn.functional as F


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
    return out.to(x.dtype)


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, K, N = dims["T"], dims["K"], dims["N"]
    x = torch.randn(T, K, generator=generator)
    # Scaled like a trained projection so outputs stay around unit variance.
    weight = torch.randn(N, K, generator=generator) / K**0.5
    bias = 0.1 * torch.randn(N, generator=generator)
    return {"x": x.to(dtype).to(device), "weight": weight.to(dtype).to(device),
            "bias": bias.to(dtype).to(device)}
