import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, stride_x, stride_out, H, eps,
                       BLOCK_H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.mean(x, axis=0)
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.mean(xc * xc, axis=0)
    rstd = tl.rsqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (xc * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    T, H = x.shape
    out = torch.empty_like(x)
    BLOCK_H = triton.next_power_of_2(H)
    _layer_norm_kernel[(T,)](x, weight, bias, out, x.stride(0), out.stride(0), H, eps,
                             BLOCK_H=BLOCK_H, num_warps=8)
    return out
