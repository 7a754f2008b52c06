import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(x_ptr, out_ptr, pos_ptr, inv_freq_ptr, n_heads, HALF, stride_t, stride_h,
                 BLOCK_HALF: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    dims = tl.arange(0, BLOCK_HALF)
    mask = dims < HALF
    angle = tl.load(pos_ptr + tok).to(tl.float32) * tl.load(inv_freq_ptr + dims, mask=mask, other=0.0)
    cos = tl.cos(angle)
    sin = tl.sin(angle)
    offs = tok * stride_t + head * stride_h + dims
    x1 = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + offs + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + offs + HALF, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=mask)


def _rotate_torch(x, cos, sin):
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, base: float):
    T, Hq, D = q.shape
    half = D // 2
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32, device=q.device) / D))
    if T <= 16:
        # Decode: a few KB of data. Triton's host-side launch path costs more than the work,
        # while these small torch ops are cheap to launch (and capture well in CUDA graphs).
        angles = positions.to(torch.float32)[:, None, None] * inv_freq
        cos, sin = angles.cos(), angles.sin()
        return _rotate_torch(q, cos, sin), _rotate_torch(k, cos, sin)
    outs = []
    for x in (q, k):
        x = x.contiguous()
        out = torch.empty_like(x)
        _rope_kernel[(T, x.shape[1])](x, out, positions, inv_freq, x.shape[1], half, x.stride(0), x.stride(1),
                                      BLOCK_HALF=triton.next_power_of_2(half), num_warps=2)
        outs.append(out)
    return outs[0], outs[1]
