"""Class 7, the reference renamed (its code embedded verbatim).

Tries: carries a verbatim copy of tasks/rms_norm/reference.py (the reference function and its
input maker, same names and bodies) and returns the copy's result: no file is read at run time.
Gates must report: AC003 (the task's reference, copied; e.g. by comparing the candidate's source
with the reference's).
"""

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
