"""Reference greedy sampling in plain PyTorch: argmax over the vocabulary, ties to the lowest index."""

import torch


def greedy_sample(logits: torch.Tensor) -> torch.Tensor:
    # torch.argmax returns the first maximal index, which is the tie rule of the task.
    return torch.argmax(logits, dim=-1)


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, V = dims["T"], dims["V"]
    # Language-model logits: a broad body whose spread varies per row, plus a few strongly
    # preferred tokens per row.
    spread = 1.5 + 2.5 * torch.rand(T, 1, generator=generator)
    logits = torch.randn(T, V, generator=generator) * spread
    top = torch.randint(0, V, (T, min(8, V)), generator=generator)
    logits.scatter_add_(1, top, 4.0 + 8.0 * torch.rand(top.shape, generator=generator))
    logits = logits.to(dtype)
    # Exact ties for the maximum in about one row in four (in the run dtype, so they stay
    # exact): the copy lands before or after the original, so the lowest-index rule decides.
    tied = torch.rand(T, generator=generator) < 0.25
    if T > 1:
        tied[1] = True
    rows = tied.nonzero().flatten()
    if len(rows) and V > 1:
        cols = torch.randint(0, V, (len(rows),), generator=generator)
        logits[rows, cols] = logits[rows].amax(dim=-1)
    return {"logits": logits.to(device)}
