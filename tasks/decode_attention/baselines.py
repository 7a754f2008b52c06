"""Production baselines of decode_attention: torch's scaled_dot_product_attention on the padded
cache with a mask of the valid positions (one query per sequence)."""

import torch
import torch.nn.functional as F


def sdpa_decode(q, k_cache, v_cache, seq_lens, scale):
    """SDPA over the cache in the input dtype, grouped-query through `enable_gqa` (torch >= 2.5;
    repeated heads before it); positions past `seq_lens` masked out."""
    B, Hq, D = q.shape
    L, Hk = k_cache.shape[1], k_cache.shape[2]
    k, v = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    valid = torch.arange(L, device=q.device)[None, :] < seq_lens.long()[:, None]
    mask = valid[:, None, None, :]
    query = q[:, :, None, :]
    try:
        out = F.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=scale,
                                             enable_gqa=Hq != Hk)
    except TypeError:  # torch < 2.5: no enable_gqa
        groups = Hq // Hk
        out = F.scaled_dot_product_attention(query, k.repeat_interleave(groups, dim=1),
                                             v.repeat_interleave(groups, dim=1), attn_mask=mask,
                                             scale=scale)
    return out[:, :, 0, :]
