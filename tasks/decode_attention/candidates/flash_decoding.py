import torch
import triton
import triton.language as tl


@triton.jit
def _split_kv_kernel(q_ptr, k_ptr, v_ptr, lens_ptr, part_o_ptr, part_lse_ptr, sm_scale,
                     stride_qb, stride_qh, stride_kb, stride_kl, stride_kh,
                     stride_vb, stride_vl, stride_vh, Hq, D,
                     NUM_SPLITS: tl.constexpr, GROUP: tl.constexpr, BLOCK_H: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + b)
    # Even share of this sequence per split, rounded to whole blocks.
    per_split = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, seq_len)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    h_mask = offs_h < GROUP
    d_mask = offs_d < D
    heads = kvh * GROUP + offs_h
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                mask=h_mask[:, None] & d_mask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    qk_scale = sm_scale * 1.4426950408889634

    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.float32)
    k_base = k_ptr + b * stride_kb + kvh * stride_kh
    v_base = v_ptr + b * stride_vb + kvh * stride_vh
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        n_mask = offs_n < hi
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

    row = (b * Hq + heads) * NUM_SPLITS + split
    # An empty split (short sequence) leaves lse = -inf and drops out of the combine.
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    tl.store(part_o_ptr + row[:, None] * D + offs_d[None, :], acc / l_safe[:, None],
             mask=h_mask[:, None] & d_mask[None, :])
    tl.store(part_lse_ptr + row, tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf")), mask=h_mask)


@triton.jit
def _combine_kernel(part_o_ptr, part_lse_ptr, out_ptr, stride_ob, stride_oh, Hq, D,
                    NUM_SPLITS: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    base = (b * Hq + h) * NUM_SPLITS
    lse = tl.load(part_lse_ptr + base + offs_s)
    o = tl.load(part_o_ptr + (base + offs_s)[:, None] * D + offs_d[None, :], mask=d_mask[None, :], other=0.0)
    m = tl.max(lse, axis=0)
    w = tl.exp2(lse - m)
    out = tl.sum(w[:, None] * o, axis=0) / tl.sum(w, axis=0)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=d_mask)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    B, Hq, D = q.shape
    L, Hk = k_cache.shape[1], k_cache.shape[2]
    group = Hq // Hk
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    out = torch.empty_like(q)
    BLOCK_N = 64
    # Flash-decoding: a small batch has only B * Hk programs, far fewer than SMs, so split
    # each sequence's KV range across programs until the grid covers the GPU.
    num_splits = triton.next_power_of_2(triton.cdiv(_num_sms(q.device), B * Hk))
    num_splits = max(1, min(num_splits, 16, triton.next_power_of_2(triton.cdiv(L, BLOCK_N))))
    part_o = torch.empty((B, Hq, num_splits, D), device=q.device, dtype=torch.float32)
    part_lse = torch.empty((B, Hq, num_splits), device=q.device, dtype=torch.float32)
    BLOCK_H = max(16, triton.next_power_of_2(group))
    BLOCK_D = triton.next_power_of_2(D)
    _split_kv_kernel[(B, Hk, num_splits)](
        q, k_cache, v_cache, seq_lens, part_o, part_lse, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), Hq, D,
        NUM_SPLITS=num_splits, GROUP=group, BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D,
        UPCAST=q.device.type != "cuda", num_warps=4, num_stages=2)
    _combine_kernel[(B, Hq)](part_o, part_lse, out, out.stride(0), out.stride(1), Hq, D,
                             NUM_SPLITS=num_splits, BLOCK_D=BLOCK_D, num_warps=4)
    return out
