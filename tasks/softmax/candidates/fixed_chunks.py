import torch
import triton
import triton.language as tl

# Columns per program. A 128k vocabulary gives 32 chunks per row, so even a single decode row
# spreads over 32 SMs.
CHUNK = 4096


@triton.jit
def _chunk_stats_kernel(x_ptr, m_ptr, s_ptr, stride_x, V, N_CHUNKS,
                        CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < V
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    tl.store(m_ptr + row * N_CHUNKS + chunk, m)
    tl.store(s_ptr + row * N_CHUNKS + chunk, s)


@triton.jit
def _normalize_kernel(x_ptr, out_ptr, m_ptr, s_ptr, stride_x, stride_out, V, N_CHUNKS,
                      CHUNK: tl.constexpr, CHUNKS_P2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    # Every program of the row merges all chunk statistics itself: cheaper than a third launch.
    idx = tl.arange(0, CHUNKS_P2)
    valid = idx < N_CHUNKS
    m_parts = tl.load(m_ptr + row * N_CHUNKS + idx, mask=valid, other=float("-inf"))
    s_parts = tl.load(s_ptr + row * N_CHUNKS + idx, mask=valid, other=0.0)
    row_max = tl.max(m_parts, axis=0)
    row_sum = tl.sum(tl.where(valid, s_parts * tl.exp(m_parts - row_max), 0.0), axis=0)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < V
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    p = tl.exp(x - row_max) / row_sum
    tl.store(out_ptr + row * stride_out + cols, p.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    T, V = x.shape
    out = torch.empty_like(x)
    n_chunks = triton.cdiv(V, CHUNK)
    m_parts = torch.empty(T, n_chunks, device=x.device, dtype=torch.float32)
    s_parts = torch.empty(T, n_chunks, device=x.device, dtype=torch.float32)
    grid = (T, n_chunks)
    _chunk_stats_kernel[grid](x, m_parts, s_parts, x.stride(0), V, n_chunks, CHUNK=CHUNK, num_warps=8)
    _normalize_kernel[grid](x, out, m_parts, s_parts, x.stride(0), out.stride(0), V, n_chunks,
                            CHUNK=CHUNK, CHUNKS_P2=triton.next_power_of_2(n_chunks), num_warps=8)
    return out
