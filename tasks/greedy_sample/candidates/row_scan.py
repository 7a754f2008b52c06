import torch
import triton
import triton.language as tl


@triton.jit
def _greedy_row_kernel(logits_ptr, out_ptr, stride_row, V, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    cols = tl.arange(0, BLOCK_V)
    # Per-lane running best. A lane sees its columns in increasing order, so the strict '>'
    # keeps the first of equal values.
    best_val = tl.full([BLOCK_V], float("-inf"), tl.float32)
    best_idx = tl.zeros([BLOCK_V], tl.int32)
    for off in range(0, V, BLOCK_V):
        x = tl.load(row_ptr + off + cols, mask=off + cols < V, other=float("-inf")).to(tl.float32)
        take = x > best_val
        best_val = tl.where(take, x, best_val)
        best_idx = tl.where(take, off + cols, best_idx)
    row_max = tl.max(best_val, axis=0)
    first = tl.min(tl.where(best_val == row_max, best_idx, V), axis=0)
    tl.store(out_ptr + row, first.to(tl.int64))


def greedy_sample(logits: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    out = torch.empty(T, device=logits.device, dtype=torch.int64)
    _greedy_row_kernel[(T,)](logits, out, logits.stride(0), V, BLOCK_V=4096, num_warps=8)
    return out
