"""Reference fused residual add + RMSNorm in plain PyTorch.

The sum is rounded once to the input dtype (that is the residual stream the next layer reads),
and the norm is computed in float32 from that rounded sum.
"""

import torch


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    residual_out = (x.float() + residual.float()).to(x.dtype)
    rf = residual_out.float()
    inv_rms = torch.rsqrt(rf.pow(2).mean(dim=-1, keepdim=True) + eps)
    out = (rf * inv_rms * weight.float()).to(x.dtype)
    return out, residual_out


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, H = dims["T"], dims["H"]
    x = torch.randn(T, H, generator=generator)
    # The residual stream grows through the layers: larger than the block output it absorbs.
    residual = 4.0 * torch.randn(T, H, generator=generator)
    weight = 1.0 + 0.1 * torch.randn(H, generator=generator)
    return {"x": x.to(dtype).to(device), "residual": residual.to(dtype).to(device),
            "weight": weight.to(dtype).to(device)}
