import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, stride_x, stride_out, H, eps,
                     BLOCK_H: tl.constexpr, USE_INT64: tl.constexpr, HAS_WEIGHT: tl.constexpr):
    row = tl.program_id(0)
    # Offsets overflow int32 past 2**31 elements: widen them for huge tensors only.
    if USE_INT64:
        x_row = x_ptr + row.to(tl.int64) * stride_x
        out_row = out_ptr + row.to(tl.int64) * stride_out
    else:
        x_row = x_ptr + row * stride_x
        out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
    y = x * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    T, H = x.shape
    out = torch.empty_like(x)
    use_int64 = x.numel() >= 2**31 or out.numel() >= 2**31
    BLOCK_H = triton.next_power_of_2(H)
    _rms_norm_kernel[(T,)](x, weight, out, x.stride(0), out.stride(0), H, eps,
                           BLOCK_H=BLOCK_H, USE_INT64=use_int64, HAS_WEIGHT=weight is not None,
                           num_warps=4 if BLOCK_H <= 2048 else 8)
    return out
