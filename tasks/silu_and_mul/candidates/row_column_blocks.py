import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_out, I, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + I + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    T, I2 = x.shape
    I = I2 // 2
    out = torch.empty(T, I, device=x.device, dtype=x.dtype)
    BLOCK = min(1024, triton.next_power_of_2(I))
    grid = (T, triton.cdiv(I, BLOCK))
    _silu_and_mul_kernel[grid](x, out, x.stride(0), out.stride(0), I, BLOCK=BLOCK, num_warps=4)
    return out
