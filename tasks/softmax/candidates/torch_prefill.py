import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_decode_kernel(x_ptr, out_ptr, stride_x, stride_out, V, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK_V)
    # Pass 1: max. Pass 2: sum of exponentials. Pass 3: write. The row stays in L2 between
    # passes for decode-sized batches.
    m = tl.full([BLOCK_V], float("-inf"), tl.float32)
    for off in range(0, V, BLOCK_V):
        x = tl.load(x_row + off + cols, mask=off + cols < V, other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    s = tl.zeros([BLOCK_V], tl.float32)
    for off in range(0, V, BLOCK_V):
        x = tl.load(x_row + off + cols, mask=off + cols < V, other=float("-inf")).to(tl.float32)
        s += tl.exp(x - row_max)
    inv_sum = 1.0 / tl.sum(s, axis=0)
    for off in range(0, V, BLOCK_V):
        mask = off + cols < V
        x = tl.load(x_row + off + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(out_row + off + cols, (tl.exp(x - row_max) * inv_sum).to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    T, V = x.shape
    # Prefill-sized batches are pure bandwidth and ATen's softmax already saturates it; the
    # Triton path wins for decode batches, where the launch and L2 reuse dominate.
    if T >= 256:
        return torch.softmax(x, dim=-1, dtype=torch.float32).to(x.dtype)
    x = x.contiguous()
    out = torch.empty_like(x)
    _softmax_decode_kernel[(T,)](x, out, x.stride(0), out.stride(0), V, BLOCK_V=4096, num_warps=8)
    return out
