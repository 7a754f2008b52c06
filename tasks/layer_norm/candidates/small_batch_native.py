import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, T, H, eps, BLOCK_H: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    col_mask = cols < H
    mask = (rows < T)[:, None] & col_mask[None, :]
    offs = rows[:, None].to(tl.int64) * H + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / H
    xc = tl.where(col_mask[None, :], x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / H + eps)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    T, H = x.shape
    if T <= 8:
        # Decode: the kernel itself takes a couple of microseconds, less than Triton's launch
        # path on the host; the native op is a single cheap launch.
        return F.layer_norm(x.float(), (H,), weight.float(), bias.float(), eps).to(x.dtype)
    x = x.contiguous()
    out = torch.empty_like(x)
    BLOCK_H = triton.next_power_of_2(H)
    ROWS = 2 if BLOCK_H <= 4096 else 1
    _layer_norm_kernel[(triton.cdiv(T, ROWS),)](x, weight, bias, out, T, H, eps, BLOCK_H=BLOCK_H, ROWS=ROWS,
                                                num_warps=8)
    return out
