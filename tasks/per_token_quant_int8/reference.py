"""Reference symmetric per-token int8 quantization in plain PyTorch (float32 math)."""

import torch


def per_token_quant_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    # An all-zero row would give scale 0; clamp so it quantizes to zeros instead of NaN.
    amax = xf.abs().amax(dim=-1).clamp_min(1e-10)
    # Tensor / tensor on purpose: CUDA turns `tensor / python_scalar` into a multiply by the
    # reciprocal, which is not the IEEE quotient the contract names.
    scale = amax / torch.full_like(amax, 127.0)
    q = torch.round(xf / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, H = dims["T"], dims["H"]
    # Activations: per-token magnitudes spread over two orders, plus a few outlier channels.
    row_scale = torch.exp(torch.randn(T, 1, generator=generator))
    x = torch.randn(T, H, generator=generator) * row_scale
    outliers = torch.randint(0, H, (max(1, H // 512),), generator=generator)
    x[:, outliers] *= 8.0
    return {"x": x.to(dtype).to(device)}
