import torch
import triton
import triton.language as tl

# Tokens of one sequence handled by one program.
CHUNK = 256


@triton.jit
def _partial_kernel(q_ptr, k_ptr, v_ptr, lens_ptr, part_o_ptr, part_lse_ptr, sm_scale,
                    stride_qb, stride_qh, stride_kb, stride_kl, stride_kh,
                    stride_vb, stride_vl, stride_vh, Hq, MAX_CHUNKS, D,
                    GROUP: tl.constexpr, CHUNK: tl.constexpr, BLOCK_H: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    c = tl.program_id(2)
    seq_len = tl.load(lens_ptr + b)
    lo = c * CHUNK
    if lo >= seq_len:
        return
    hi = tl.minimum(lo + CHUNK, seq_len)

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

    # Partial results: normalised output and base-2 log-sum-exp per head.
    row = (b * Hq + heads) * MAX_CHUNKS + c
    tl.store(part_o_ptr + row[:, None] * D + offs_d[None, :], acc / l_i[:, None],
             mask=h_mask[:, None] & d_mask[None, :])
    tl.store(part_lse_ptr + row, m_i + tl.log2(l_i), mask=h_mask)


@triton.jit
def _combine_kernel(part_o_ptr, part_lse_ptr, lens_ptr, out_ptr, stride_ob, stride_oh,
                    Hq, MAX_CHUNKS, D, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    seq_len = tl.load(lens_ptr + b)
    n_chunks = tl.cdiv(seq_len, CHUNK)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    base = (b * Hq + h) * MAX_CHUNKS
    m = tl.full((), float("-inf"), dtype=tl.float32)
    total = tl.zeros((), dtype=tl.float32)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    # Merge this sequence's chunks with a running log-sum-exp.
    for c in range(0, n_chunks):
        lse = tl.load(part_lse_ptr + base + c)
        o = tl.load(part_o_ptr + (base + c) * D + offs_d, mask=d_mask, other=0.0)
        m_new = tl.maximum(m, lse)
        alpha = tl.exp2(m - m_new)
        w = tl.exp2(lse - m_new)
        acc = acc * alpha + w * o
        total = total * alpha + w
        m = m_new
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_d, (acc / total).to(out_ptr.dtype.element_ty),
             mask=d_mask)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    B, Hq, D = q.shape
    L, Hk = k_cache.shape[1], k_cache.shape[2]
    group = Hq // Hk
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    out = torch.empty_like(q)
    max_chunks = triton.cdiv(L, CHUNK)
    part_o = torch.empty((B, Hq, max_chunks, D), device=q.device, dtype=torch.float32)
    part_lse = torch.empty((B, Hq, max_chunks), device=q.device, dtype=torch.float32)
    BLOCK_H = max(16, triton.next_power_of_2(group))
    BLOCK_D = triton.next_power_of_2(D)
    BLOCK_N = 64
    # Long caches get many programs per sequence; programs past a sequence's end exit at once.
    _partial_kernel[(B, Hk, max_chunks)](
        q, k_cache, v_cache, seq_lens, part_o, part_lse, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), Hq, max_chunks, D,
        GROUP=group, CHUNK=CHUNK, BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D,
        UPCAST=q.device.type != "cuda", num_warps=4, num_stages=2)
    _combine_kernel[(B, Hq)](part_o, part_lse, seq_lens, out, out.stride(0), out.stride(1),
                             Hq, max_chunks, D, CHUNK=CHUNK, BLOCK_D=BLOCK_D, num_warps=4)
    return out
