import torch
import triton
import triton.language as tl


@triton.jit
def _greedy_kernel(logits_ptr, out_ptr, stride_row, V, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    cols = tl.arange(0, BLOCK_V)
    best_val = float("-inf")
    best_idx = 0
    for off in range(0, V, BLOCK_V):
        x = tl.load(row_ptr + off + cols, mask=off + cols < V, other=float("-inf")).to(tl.float32)
        tile_max = tl.max(x, axis=0)
        tile_idx = tl.argmax(x, axis=0) + off
        # Strict '>': an earlier tile keeps a tied maximum.
        better = tile_max > best_val
        best_idx = tl.where(better, tile_idx, best_idx)
        best_val = tl.where(better, tile_max, best_val)
    tl.store(out_ptr + row, best_idx)


def greedy_sample(logits: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    # Vocabulary ids fit in int32: half the bytes of int64 for the sampled ids.
    out = torch.empty(T, device=logits.device, dtype=torch.int32)
    _greedy_kernel[(T,)](logits, out, logits.stride(0), V, BLOCK_V=4096, num_warps=8)
    return out
