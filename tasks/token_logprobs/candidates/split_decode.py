import torch
import triton
import triton.language as tl


@triton.jit
def _split_lse_kernel(logits_ptr, m_ptr, s_ptr, stride_row, V, SPLIT_COLS, N_SPLIT: tl.constexpr,
                      BLOCK_V: tl.constexpr):
    split = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    start = split * SPLIT_COLS
    cols = tl.arange(0, BLOCK_V)
    run_max = -3.0e38
    run_sum = 0.0
    for off in range(0, SPLIT_COLS, BLOCK_V):
        c = start + off + cols
        x = tl.load(logits_ptr + row * stride_row + c, mask=(c < V) & (off + cols < SPLIT_COLS),
                    other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, tl.max(x, axis=0))
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        run_max = new_max
    tl.store(m_ptr + row * N_SPLIT + split, run_max)
    tl.store(s_ptr + row * N_SPLIT + split, run_sum)


@triton.jit
def _merge_kernel(logits_ptr, ids_ptr, m_ptr, s_ptr, out_ptr, stride_row, N_SPLIT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    parts = tl.arange(0, N_SPLIT)
    m_parts = tl.load(m_ptr + row * N_SPLIT + parts)
    s_parts = tl.load(s_ptr + row * N_SPLIT + parts)
    row_max = tl.max(m_parts, axis=0)
    lse = row_max + tl.log(tl.sum(s_parts * tl.exp(m_parts - row_max), axis=0))
    token = tl.load(ids_ptr + row)
    tl.store(out_ptr + row, tl.load(logits_ptr + row * stride_row + token).to(tl.float32) - lse)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    # Scoring a handful of decode rows: split each row's vocabulary so that T * n_split
    # programs cover every SM; large batches already do, and keep one program per row.
    target = 2 * _num_sms(logits.device)
    n_split = triton.next_power_of_2(max(1, target // T))
    n_split = max(1, min(n_split, 64, triton.next_power_of_2(triton.cdiv(V, 64))))
    BLOCK_V = min(1024, triton.next_power_of_2(triton.cdiv(V, n_split)))
    split_cols = triton.cdiv(triton.cdiv(V, n_split), BLOCK_V) * BLOCK_V
    m_parts = torch.empty(T, n_split, device=logits.device, dtype=torch.float32)
    s_parts = torch.empty(T, n_split, device=logits.device, dtype=torch.float32)
    out = torch.empty(T, device=logits.device, dtype=torch.float32)
    _split_lse_kernel[(n_split, T)](logits, m_parts, s_parts, logits.stride(0), V, split_cols,
                                    N_SPLIT=n_split, BLOCK_V=BLOCK_V, num_warps=4)
    _merge_kernel[(T,)](logits, token_ids, m_parts, s_parts, out, logits.stride(0), N_SPLIT=n_split,
                        num_warps=1)
    return out
