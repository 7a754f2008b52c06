import torch
import triton
import triton.language as tl

# Fixed columns per program: 16 programs per row of a 128k vocabulary, enough parallelism for
# decode without a batch-dependent launch.
CHUNK = 8192


@triton.jit
def _chunk_lse_kernel(logits_ptr, m_ptr, s_ptr, stride_row, V, N_CHUNKS, CHUNK: tl.constexpr,
                      BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_V], -3.0e38, tl.float32)
    s = tl.zeros([BLOCK_V], tl.float32)
    for off in range(0, CHUNK, BLOCK_V):
        c = chunk * CHUNK + off + cols
        x = tl.load(logits_ptr + row * stride_row + c, mask=c < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    m_chunk = tl.max(m, axis=0)
    tl.store(m_ptr + row * N_CHUNKS + chunk, m_chunk)
    tl.store(s_ptr + row * N_CHUNKS + chunk, tl.sum(s * tl.exp(m - m_chunk), axis=0))


@triton.jit
def _combine_kernel(logits_ptr, ids_ptr, m_ptr, s_ptr, out_ptr, stride_row, N_CHUNKS,
                    CHUNKS_P2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    idx = tl.arange(0, CHUNKS_P2)
    valid = idx < N_CHUNKS
    m_parts = tl.load(m_ptr + row * N_CHUNKS + idx, mask=valid, other=-3.0e38)
    s_parts = tl.load(s_ptr + row * N_CHUNKS + idx, mask=valid, other=0.0)
    row_max = tl.max(m_parts, axis=0)
    lse = row_max + tl.log(tl.sum(s_parts * tl.exp(m_parts - row_max), axis=0))
    token = tl.load(ids_ptr + row)
    target = tl.load(logits_ptr + row * stride_row + token).to(tl.float32)
    tl.store(out_ptr + row, target - lse)


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    n_chunks = triton.cdiv(V, CHUNK)
    m_parts = torch.empty(T, n_chunks, device=logits.device, dtype=torch.float32)
    s_parts = torch.empty(T, n_chunks, device=logits.device, dtype=torch.float32)
    out = torch.empty(T, device=logits.device, dtype=torch.float32)
    _chunk_lse_kernel[(T, n_chunks)](logits, m_parts, s_parts, logits.stride(0), V, n_chunks,
                                     CHUNK=CHUNK, BLOCK_V=2048, num_warps=8)
    _combine_kernel[(T,)](logits, token_ids, m_parts, s_parts, out, logits.stride(0), n_chunks,
                          CHUNKS_P2=triton.next_power_of_2(n_chunks), num_warps=1)
    return out
