import torch
import triton
import triton.language as tl


@triton.jit
def _partial_stats_kernel(x_ptr, m_ptr, s_ptr, stride_x, V, SPLIT_COLS,
                          N_SPLIT: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    start = split * SPLIT_COLS
    cols = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_V], -3.0e38, tl.float32)
    s = tl.zeros([BLOCK_V], tl.float32)
    for off in range(0, SPLIT_COLS, BLOCK_V):
        c = start + off + cols
        mask = (c < V) & (off + cols < SPLIT_COLS)
        x = tl.load(x_ptr + row * stride_x + c, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    m_part = tl.max(m, axis=0)
    s_part = tl.sum(s * tl.exp(m - m_part), axis=0)
    tl.store(m_ptr + row * N_SPLIT + split, m_part)
    tl.store(s_ptr + row * N_SPLIT + split, s_part)


@triton.jit
def _softmax_write_kernel(x_ptr, out_ptr, m_ptr, s_ptr, stride_x, stride_out, V, SPLIT_COLS,
                          N_SPLIT: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    parts = tl.arange(0, N_SPLIT)
    m_parts = tl.load(m_ptr + row * N_SPLIT + parts)
    s_parts = tl.load(s_ptr + row * N_SPLIT + parts)
    row_max = tl.max(m_parts, axis=0)
    inv_sum = 1.0 / tl.sum(s_parts * tl.exp(m_parts - row_max), axis=0)
    start = split * SPLIT_COLS
    cols = tl.arange(0, BLOCK_V)
    for off in range(0, SPLIT_COLS, BLOCK_V):
        c = start + off + cols
        mask = (c < V) & (off + cols < SPLIT_COLS)
        x = tl.load(x_ptr + row * stride_x + c, mask=mask, other=float("-inf")).to(tl.float32)
        p = tl.exp(x - row_max) * inv_sum
        tl.store(out_ptr + row * stride_out + c, p.to(out_ptr.dtype.element_ty), mask=mask)


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    T, V = x.shape
    out = torch.empty_like(x)
    # Decode batches have a handful of rows: one program per row would leave most SMs idle,
    # so split each row's vocabulary until the grid covers ~2 waves of the SMs.
    n_split = 1
    while T * n_split < 2 * _sm_count(x.device) and n_split < 64 and V // (2 * n_split) >= 32:
        n_split *= 2
    BLOCK_V = min(2048, triton.next_power_of_2(triton.cdiv(V, n_split)))
    split_cols = triton.cdiv(triton.cdiv(V, n_split), BLOCK_V) * BLOCK_V
    m_parts = torch.empty(T, n_split, device=x.device, dtype=torch.float32)
    s_parts = torch.empty(T, n_split, device=x.device, dtype=torch.float32)
    grid = (T, n_split)
    _partial_stats_kernel[grid](x, m_parts, s_parts, x.stride(0), V, split_cols,
                                N_SPLIT=n_split, BLOCK_V=BLOCK_V, num_warps=8)
    _softmax_write_kernel[grid](x, out, m_parts, s_parts, x.stride(0), out.stride(0), V, split_cols,
                                N_SPLIT=n_split, BLOCK_V=BLOCK_V, num_warps=8)
    return out
