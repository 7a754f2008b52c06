import torch
import triton
import triton.language as tl


@triton.jit
def _fused_split_kernel(logits_ptr, ids_ptr, m_ptr, s_ptr, count_ptr, out_ptr, stride_row, V,
                        N_CHUNKS: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(logits_ptr + row * stride_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    tl.store(m_ptr + row * N_CHUNKS + chunk, m)
    tl.store(s_ptr + row * N_CHUNKS + chunk, tl.sum(tl.exp(x - m), axis=0))
    # Publish this chunk (acq_rel orders the stores above before the count).
    tl.atomic_add(count_ptr + row, 1)
    if chunk == 0:
        # The leader merges once every chunk of its row has published: one launch, no
        # second kernel for the merge.
        while tl.atomic_add(count_ptr + row, 0) < N_CHUNKS:
            pass
        idx = tl.arange(0, N_CHUNKS)
        m_parts = tl.load(m_ptr + row * N_CHUNKS + idx, volatile=True)
        s_parts = tl.load(s_ptr + row * N_CHUNKS + idx, volatile=True)
        row_max = tl.max(m_parts, axis=0)
        lse = row_max + tl.log(tl.sum(s_parts * tl.exp(m_parts - row_max), axis=0))
        token = tl.load(ids_ptr + row)
        target = tl.load(logits_ptr + row * stride_row + token).to(tl.float32)
        tl.store(out_ptr + row, target - lse)


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    # 16 programs per row whatever the vocabulary size.
    N_CHUNKS = 16
    CHUNK = triton.next_power_of_2(triton.cdiv(V, N_CHUNKS))
    m_parts = torch.empty(T, N_CHUNKS, device=logits.device, dtype=torch.float32)
    s_parts = torch.empty(T, N_CHUNKS, device=logits.device, dtype=torch.float32)
    count = torch.zeros(T, device=logits.device, dtype=torch.int32)
    out = torch.empty(T, device=logits.device, dtype=torch.float32)
    _fused_split_kernel[(T, N_CHUNKS)](logits, token_ids, m_parts, s_parts, count, out, logits.stride(0), V,
                                       N_CHUNKS=N_CHUNKS, CHUNK=CHUNK, num_warps=8)
    return out
