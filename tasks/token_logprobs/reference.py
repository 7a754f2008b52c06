"""Reference log-probability of one given token per row, in plain PyTorch (float32 result)."""

import torch


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return logprobs.gather(1, token_ids.view(-1, 1)).squeeze(1)


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, V = dims["T"], dims["V"]
    # Language-model logits: a broad body whose spread varies per row, plus a few strongly
    # preferred tokens per row.
    spread = 1.5 + 2.5 * torch.rand(T, 1, generator=generator)
    logits = torch.randn(T, V, generator=generator) * spread
    top = torch.randint(0, V, (T, min(8, V)), generator=generator)
    logits.scatter_add_(1, top, 4.0 + 8.0 * torch.rand(top.shape, generator=generator))
    # Scored tokens: mostly a likely token (as after sampling), sometimes any token of the
    # vocabulary (as when scoring a given prompt), including the first and last ids.
    likely = top[torch.arange(T), torch.randint(0, top.shape[1], (T,), generator=generator)]
    anywhere = torch.randint(0, V, (T,), generator=generator)
    token_ids = torch.where(torch.rand(T, generator=generator) < 0.6, likely, anywhere)
    if T > 2:
        token_ids[1], token_ids[-1] = 0, V - 1
    return {"logits": logits.to(dtype).to(device), "token_ids": token_ids.to(device)}
