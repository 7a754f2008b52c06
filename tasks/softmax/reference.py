"""Reference softmax over the vocabulary axis in plain PyTorch (float32 math, output in the input dtype)."""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, V = dims["T"], dims["V"]
    # Language-model logits: a broad body whose spread varies per row, plus a few strongly
    # preferred tokens per row, so some rows are flat and others peaked.
    spread = 1.5 + 2.5 * torch.rand(T, 1, generator=generator)
    x = torch.randn(T, V, generator=generator) * spread
    top = torch.randint(0, V, (T, min(8, V)), generator=generator)
    x.scatter_add_(1, top, 4.0 + 8.0 * torch.rand(top.shape, generator=generator))
    return {"x": x.to(dtype).to(device)}
