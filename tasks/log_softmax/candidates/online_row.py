import torch
import triton
import triton.language as tl


@triton.jit
def _log_softmax_kernel(x_ptr, out_ptr, stride_x, stride_out, V, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK_V)
    # Running (max, sum) carried as scalars: each tile is reduced, then merged into the total.
    run_max = float("-inf")
    run_sum = 0.0
    for off in range(0, V, BLOCK_V):
        mask = off + cols < V
        x = tl.load(x_row + off + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tile_max = tl.max(x, axis=0)
        new_max = tl.maximum(run_max, tile_max)
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        run_max = new_max
    lse = run_max + tl.log(run_sum)
    for off in range(0, V, BLOCK_V):
        mask = off + cols < V
        x = tl.load(x_row + off + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + off + cols, (x - lse).to(out_ptr.dtype.element_ty), mask=mask)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    T, V = x.shape
    out = torch.empty_like(x)
    _log_softmax_kernel[(T,)](x, out, x.stride(0), out.stride(0), V, BLOCK_V=4096, num_warps=8)
    return out
