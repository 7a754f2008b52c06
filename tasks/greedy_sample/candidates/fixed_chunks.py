import torch
import triton
import triton.language as tl

# Columns per program: a 128k vocabulary is 16 programs per row, so decode batches still
# spread over the SMs; the chunking depends on V only.
CHUNK = 8192


@triton.jit
def _chunk_argmax_kernel(logits_ptr, val_ptr, idx_ptr, stride_row, V, N_CHUNKS,
                         CHUNK: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = tl.arange(0, BLOCK_V)
    best_val = tl.full([BLOCK_V], float("-inf"), tl.float32)
    best_idx = tl.full([BLOCK_V], 2147483647, tl.int32)
    for off in range(0, CHUNK, BLOCK_V):
        c = chunk * CHUNK + off + cols
        x = tl.load(logits_ptr + row * stride_row + c, mask=c < V, other=float("-inf")).to(tl.float32)
        take = (x > best_val) & (c < V)
        best_val = tl.where(take, x, best_val)
        best_idx = tl.where(take, c, best_idx)
    m = tl.max(best_val, axis=0)
    tl.store(val_ptr + row * N_CHUNKS + chunk, m)
    tl.store(idx_ptr + row * N_CHUNKS + chunk, tl.min(tl.where(best_val == m, best_idx, 2147483647), axis=0))


@triton.jit
def _merge_kernel(val_ptr, idx_ptr, out_ptr, N_CHUNKS, CHUNKS_P2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, CHUNKS_P2)
    valid = k < N_CHUNKS
    vals = tl.load(val_ptr + row * N_CHUNKS + k, mask=valid, other=float("-inf"))
    idxs = tl.load(idx_ptr + row * N_CHUNKS + k, mask=valid, other=2147483647)
    m = tl.max(vals, axis=0)
    tl.store(out_ptr + row, tl.min(tl.where(vals == m, idxs, 2147483647), axis=0).to(tl.int64))


def greedy_sample(logits: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    n_chunks = triton.cdiv(V, CHUNK)
    vals = torch.empty(T, n_chunks, device=logits.device, dtype=torch.float32)
    idxs = torch.empty(T, n_chunks, device=logits.device, dtype=torch.int32)
    out = torch.empty(T, device=logits.device, dtype=torch.int64)
    _chunk_argmax_kernel[(T, n_chunks)](logits, vals, idxs, logits.stride(0), V, n_chunks,
                                        CHUNK=CHUNK, BLOCK_V=2048, num_warps=8)
    _merge_kernel[(T,)](vals, idxs, out, n_chunks, CHUNKS_P2=triton.next_power_of_2(n_chunks), num_warps=1)
    return out
