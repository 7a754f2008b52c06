import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_split_kernel(x_ptr, w_ptr, out_ptr, partial_ptr, arrived_ptr, stride_x, stride_out,
                           H, eps, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    cols = part * BLOCK + tl.arange(0, BLOCK)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(partial_ptr + row * SPLIT + part, tl.sum(x * x, axis=0))
    # Publish this slice's partial sum, then wait until every slice of the row has done so:
    # each program keeps its slice in registers and x is read from memory exactly once.
    arrived = tl.atomic_add(arrived_ptr + row, 1) + 1
    while arrived < SPLIT:
        arrived = tl.atomic_add(arrived_ptr + row, 0)
    parts = tl.load(partial_ptr + row * SPLIT + tl.arange(0, SPLIT), volatile=True)
    rstd = 1.0 / tl.sqrt(tl.sum(parts, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    T, H = x.shape
    out = torch.empty_like(x)
    SPLIT = 4
    BLOCK = triton.next_power_of_2(triton.cdiv(H, SPLIT))
    partial = torch.empty(T, SPLIT, device=x.device, dtype=torch.float32)
    arrived = torch.zeros(T, device=x.device, dtype=torch.int32)
    _rms_norm_split_kernel[(T, SPLIT)](x, weight, out, partial, arrived, x.stride(0), out.stride(0),
                                       H, eps, SPLIT=SPLIT, BLOCK=BLOCK, num_warps=4)
    return out
