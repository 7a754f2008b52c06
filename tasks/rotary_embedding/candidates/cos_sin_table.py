import torch
import triton
import triton.language as tl


@triton.jit
def _rope_apply_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, cos_ptr, sin_ptr, T, Hq, HALF,
                       stride_qt, stride_qh, stride_kt, stride_kh,
                       BLOCK_T: tl.constexpr, BLOCK_HALF: tl.constexpr):
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    head = tl.program_id(1)
    dims = tl.arange(0, BLOCK_HALF)
    mask = (toks < T)[:, None] & (dims < HALF)[None, :]
    tab = toks[:, None].to(tl.int64) * HALF + dims[None, :]
    cos = tl.load(cos_ptr + tab, mask=mask, other=0.0)
    sin = tl.load(sin_ptr + tab, mask=mask, other=0.0)
    # Programs 0..Hq-1 of axis 1 rotate q heads, the rest rotate k heads.
    if head < Hq:
        offs = toks[:, None].to(tl.int64) * stride_qt + head * stride_qh + dims[None, :]
        src = q_ptr
        dst = qo_ptr
    else:
        offs = toks[:, None].to(tl.int64) * stride_kt + (head - Hq) * stride_kh + dims[None, :]
        src = k_ptr
        dst = ko_ptr
    x1 = tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + offs + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(dst + offs, (x1 * cos - x2 * sin).to(dst.dtype.element_ty), mask=mask)
    tl.store(dst + offs + HALF, (x2 * cos + x1 * sin).to(dst.dtype.element_ty), mask=mask)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, base: float):
    q = q.contiguous()
    k = k.contiguous()
    T, Hq, D = q.shape
    Hk = k.shape[1]
    half = D // 2
    # cos/sin once per (token, frequency) instead of once per head.
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32, device=q.device) / D))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    cos = angles.cos().contiguous()
    sin = angles.sin().contiguous()
    q_out = torch.empty_like(q)
    k_out = torch.empty_like(k)
    BLOCK_T = 1 if T < 8 else (4 if T < 512 else 16)
    grid = (triton.cdiv(T, BLOCK_T), Hq + Hk)
    _rope_apply_kernel[grid](q, k, q_out, k_out, cos, sin, T, Hq, half,
                             q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                             BLOCK_T=BLOCK_T, BLOCK_HALF=triton.next_power_of_2(half), num_warps=4)
    return q_out, k_out
