import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(src_ptr, dst_ptr, tok, stride_t, stride_h, n_heads, cos, sin, HALF,
                  BLOCK_HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr):
    heads = tl.arange(0, BLOCK_HEADS)
    dims = tl.arange(0, BLOCK_HALF)
    mask = (heads < n_heads)[:, None] & (dims < HALF)[None, :]
    offs = tok * stride_t + heads[:, None] * stride_h + dims[None, :]
    x1 = tl.load(src_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src_ptr + offs + HALF, mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * cos[None, :] - x2 * sin[None, :]
    o2 = x2 * cos[None, :] + x1 * sin[None, :]
    tl.store(dst_ptr + offs, o1.to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(dst_ptr + offs + HALF, o2.to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_token_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, pos_ptr, inv_freq_ptr, Hq, Hk, HALF,
                       stride_qt, stride_qh, stride_kt, stride_kh,
                       BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_HALF: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    dims = tl.arange(0, BLOCK_HALF)
    pos = tl.load(pos_ptr + tok).to(tl.float32)
    inv_freq = tl.load(inv_freq_ptr + dims, mask=dims < HALF, other=0.0)
    # One angle per frequency, shared by every q and k head of the token.
    angle = pos * inv_freq
    cos = tl.cos(angle)
    sin = tl.sin(angle)
    _rotate_heads(q_ptr, qo_ptr, tok, stride_qt, stride_qh, Hq, cos, sin, HALF, BLOCK_HQ, BLOCK_HALF)
    _rotate_heads(k_ptr, ko_ptr, tok, stride_kt, stride_kh, Hk, cos, sin, HALF, BLOCK_HK, BLOCK_HALF)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, base: float):
    q = q.contiguous()
    k = k.contiguous()
    T, Hq, D = q.shape
    Hk = k.shape[1]
    half = D // 2
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32, device=q.device) / D))
    q_out = torch.empty_like(q)
    k_out = torch.empty_like(k)
    _rope_token_kernel[(T,)](q, k, q_out, k_out, positions, inv_freq, Hq, Hk, half,
                             q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                             BLOCK_HQ=triton.next_power_of_2(Hq), BLOCK_HK=triton.next_power_of_2(Hk),
                             BLOCK_HALF=triton.next_power_of_2(half), num_warps=4)
    return q_out, k_out
