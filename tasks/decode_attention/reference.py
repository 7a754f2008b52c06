"""Reference grouped-query decode attention over a padded KV cache, in plain PyTorch (float32)."""

import torch


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    B, Hq, D = q.shape
    L, Hk = k_cache.shape[1], k_cache.shape[2]
    G = Hq // Hk
    qf = q.float().view(B, Hk, G, D)
    valid = torch.arange(L, device=q.device)[None, :] < seq_lens.long()[:, None]  # [B, L]
    scores = torch.einsum("bhgd,blhd->bhgl", qf, k_cache.float()) * scale
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    # Zero the padding too, so that whatever it holds cannot leak in through 0 * value.
    v = v_cache.float().masked_fill(~valid[:, :, None, None], 0.0)
    out = torch.einsum("bhgl,blhd->bhgd", p, v)
    return out.reshape(B, Hq, D).to(q.dtype)


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    B, L, Hq, Hk, D = dims["B"], dims["L"], dims["Hq"], dims["Hk"], dims["D"]
    q = torch.randn(B, Hq, D, generator=generator)
    k = torch.randn(B, L, Hk, D, generator=generator)
    v = torch.randn(B, L, Hk, D, generator=generator)
    # Ragged lengths in [1, L]; one row spans the whole padded length.
    seq_lens = torch.randint(1, L + 1, (B,), generator=generator, dtype=torch.int32)
    seq_lens[torch.randint(0, B, (1,), generator=generator)] = L
    # Padding holds large stale values: a kernel that reads it unmasked gets a visibly wrong answer.
    pad = torch.arange(L)[None, :] >= seq_lens.long()[:, None]
    k[pad] = 50.0 * torch.randn(int(pad.sum()), Hk, D, generator=generator)
    v[pad] = 50.0 * torch.randn(int(pad.sum()), Hk, D, generator=generator)
    return {"q": q.to(dtype).to(device), "k_cache": k.to(dtype).to(device),
            "v_cache": v.to(dtype).to(device), "seq_lens": seq_lens.to(device)}
