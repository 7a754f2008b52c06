import torch
import triton
import triton.language as tl


@triton.jit
def _gqa_decode_kernel(q_ptr, k_ptr, v_ptr, lens_ptr, out_ptr, sm_scale,
                       stride_qb, stride_qh, stride_kb, stride_kl, stride_kh,
                       stride_vb, stride_vl, stride_vh, stride_ob, stride_oh, D,
                       GROUP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_D: tl.constexpr, UPCAST: tl.constexpr):
    # One program per (sequence, kv head): the GROUP query heads that share a kv head are
    # the rows of one tile, so each K/V block is read once for all of them.
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    seq_len = tl.load(lens_ptr + b)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    h_mask = offs_h < GROUP
    d_mask = offs_d < D
    heads = kvh * GROUP + offs_h
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                mask=h_mask[:, None] & d_mask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # work in base 2

    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.float32)
    k_base = k_ptr + b * stride_kb + kvh * stride_kh
    v_base = v_ptr + b * stride_vb + kvh * stride_vh
    for start in range(0, seq_len, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        n_mask = offs_n < seq_len
        # K^T tile [BLOCK_D, BLOCK_N]
        k = tl.load(k_base + offs_n[None, :] * stride_kl + offs_d[:, None],
                    mask=n_mask[None, :] & d_mask[:, None], other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        s = tl.dot(q, k, input_precision="ieee") * qk_scale
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + offs_n[:, None] * stride_vl + offs_d[None, :],
                    mask=n_mask[:, None] & d_mask[None, :], other=0.0)
        if UPCAST:
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=h_mask[:, None] & d_mask[None, :])


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    B, Hq, D = q.shape
    Hk = k_cache.shape[2]
    group = Hq // Hk
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    out = torch.empty_like(q)
    # tl.dot needs at least 16 rows; pad the head group up to that.
    BLOCK_H = max(16, triton.next_power_of_2(group))
    BLOCK_D = triton.next_power_of_2(D)
    BLOCK_N = 64 if q.dtype == torch.float32 else 128
    _gqa_decode_kernel[(B, Hk)](
        q, k_cache, v_cache, seq_lens, out, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), D,
        GROUP=group, BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D,
        UPCAST=q.device.type != "cuda", num_warps=4, num_stages=3)
    return out
