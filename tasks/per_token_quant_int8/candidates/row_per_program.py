import torch
import triton
import triton.language as tl


@triton.jit
def _rint(v):
    # Round half to even (what torch.round does) with the 1.5 * 2**23 trick: exact for |v| < 2**22.
    return (v + 12582912.0) - 12582912.0


@triton.jit
def _quant_row_kernel(x_ptr, q_ptr, scale_ptr, stride_x, stride_q, H, BLOCK_H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-10)
    # IEEE divisions (Triton's `/` is the approximate div.full on NVIDIA), so the codes
    # agree with torch's x / scale bit for bit.
    scale = tl.math.div_rn(amax, 127.0)
    q = _rint(tl.math.div_rn(x, scale))
    q = tl.minimum(tl.maximum(q, -127.0), 127.0)
    tl.store(q_ptr + row * stride_q + cols, q.to(tl.int8), mask=mask)
    tl.store(scale_ptr + row, scale)


def per_token_quant_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.contiguous()
    T, H = x.shape
    q = torch.empty((T, H), device=x.device, dtype=torch.int8)
    scale = torch.empty((T,), device=x.device, dtype=torch.float32)
    BLOCK_H = triton.next_power_of_2(H)
    num_warps = min(16, max(1, BLOCK_H // 512))
    _quant_row_kernel[(T,)](x, q, scale, x.stride(0), q.stride(0), H, BLOCK_H=BLOCK_H, num_warps=num_warps)
    return q, scale
