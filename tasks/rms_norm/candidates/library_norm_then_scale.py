import torch
import triton
import triton.language as tl


@triton.jit
def _scale_rows_kernel(x_ptr, w_ptr, norm_ptr, out_ptr, stride_x, stride_out, H, eps,
                       BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < H
    norm = tl.load(norm_ptr + row)
    rstd = 1.0 / tl.sqrt(norm * norm / H + eps)
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    T, H = x.shape
    out = torch.empty_like(x)
    # The row norms come from the library's reduction kernel (vectorised, tuned per shape);
    # the scale pass is then a pure streaming kernel over (row, column block), which fills
    # the GPU even for a single row.
    norm = torch.linalg.vector_norm(x, ord=2, dim=-1, dtype=torch.float32)
    BLOCK = min(1024, triton.next_power_of_2(H))
    grid = (T, triton.cdiv(H, BLOCK))
    _scale_rows_kernel[grid](x, weight, norm, out, x.stride(0), out.stride(0), H, eps,
                             BLOCK=BLOCK, num_warps=4)
    return out
