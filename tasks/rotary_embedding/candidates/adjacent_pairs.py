import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(x_ptr, out_ptr, pos_ptr, inv_freq_ptr, n_heads, HALF, stride_t, stride_h,
                 BLOCK_HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    heads = tl.arange(0, BLOCK_HEADS)
    pairs = tl.arange(0, BLOCK_HALF)
    mask = (heads < n_heads)[:, None] & (pairs < HALF)[None, :]
    angle = tl.load(pos_ptr + tok).to(tl.float32) * tl.load(inv_freq_ptr + pairs, mask=pairs < HALF, other=0.0)
    cos = tl.cos(angle)[None, :]
    sin = tl.sin(angle)[None, :]
    # Each pair is two neighbouring elements: one 8-byte load feeds both.
    even = tok * stride_t + heads[:, None] * stride_h + 2 * pairs[None, :]
    x1 = tl.load(x_ptr + even, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + even + 1, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + even, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + even + 1, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=mask)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, base: float):
    T, _, D = q.shape
    half = D // 2
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32, device=q.device) / D))
    outs = []
    for x in (q, k):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_heads = x.shape[1]
        _rope_kernel[(T,)](x, out, positions, inv_freq, n_heads, half, x.stride(0), x.stride(1),
                           BLOCK_HEADS=triton.next_power_of_2(n_heads), BLOCK_HALF=triton.next_power_of_2(half),
                           num_warps=4)
        outs.append(out)
    return outs[0], outs[1]
