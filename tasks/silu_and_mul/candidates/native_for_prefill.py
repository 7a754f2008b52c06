import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, I, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    gate = tl.load(x_ptr + row * 2 * I + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * I + I + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * I + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    T, I2 = x.shape
    I = I2 // 2
    if T >= 32:
        # Prefill: bandwidth-bound, and torch's vectorised elementwise kernels already stream at
        # full speed; the fused kernel only pays off at decode, where launches dominate.
        xf = x.float()
        return (F.silu(xf[:, :I]) * xf[:, I:]).to(x.dtype)
    x = x.contiguous()
    out = torch.empty(T, I, device=x.device, dtype=x.dtype)
    BLOCK = min(2048, triton.next_power_of_2(I))
    _silu_and_mul_kernel[(T, triton.cdiv(I, BLOCK))](x, out, I, BLOCK=BLOCK, num_warps=4)
    return out
