import torch
import triton
import triton.language as tl


@triton.heuristics({
    # Decode: one token per program, the two halves handled separately. Prefill: tiles of
    # tokens over the full head width, so every load and store is one contiguous row.
    "BLOCK_T": lambda args: 1 if args["T"] < 16 else 8,
})
@triton.jit
def _rope_kernel(x_ptr, out_ptr, pos_ptr, inv_freq_ptr, T, HALF, stride_t, stride_h,
                 BLOCK_T: tl.constexpr, BLOCK_HALF: tl.constexpr):
    head = tl.program_id(1)
    if BLOCK_T == 1:
        tok = tl.program_id(0).to(tl.int64)
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
    else:
        toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        dims = tl.arange(0, 2 * BLOCK_HALF)
        # Lane d pairs with lane d +/- HALF; the first half takes -sin, the second +sin.
        first = dims < HALF
        freq_idx = tl.where(first, dims, dims - HALF)
        partner = tl.where(first, dims + HALF, dims - HALF)
        mask = (toks < T)[:, None] & (dims < 2 * HALF)[None, :]
        pos = tl.load(pos_ptr + toks, mask=toks < T, other=0).to(tl.float32)
        inv_freq = tl.load(inv_freq_ptr + freq_idx, mask=dims < 2 * HALF, other=0.0)
        angle = pos[:, None] * inv_freq[None, :]
        cos = tl.cos(angle)
        sin = tl.where(first[None, :], -tl.sin(angle), tl.sin(angle))
        row = toks[:, None].to(tl.int64) * stride_t + head * stride_h
        x = tl.load(x_ptr + row + dims[None, :], mask=mask, other=0.0).to(tl.float32)
        xp = tl.load(x_ptr + row + partner[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row + dims[None, :], tl.fma(xp, sin, x * cos).to(out_ptr.dtype.element_ty), mask=mask)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, base: float):
    T, _, D = q.shape
    half = D // 2
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32, device=q.device) / D))
    outs = []
    for x in (q, k):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_heads = x.shape[1]

        def grid(meta, n_heads=n_heads):
            return (triton.cdiv(T, meta["BLOCK_T"]), n_heads)

        _rope_kernel[grid](x, out, positions, inv_freq, T, half, x.stride(0), x.stride(1),
                           BLOCK_HALF=triton.next_power_of_2(half), num_warps=4)
        outs.append(out)
    return outs[0], outs[1]
