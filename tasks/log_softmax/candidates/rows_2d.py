import torch
import triton
import triton.language as tl


@triton.jit
def _log_softmax_rows_kernel(x_ptr, out_ptr, T, V, stride_x, stride_out,
                             ROWS: tl.constexpr, BLOCK_V: tl.constexpr):
    # ROWS rows per program share every column tile: wide, fully coalesced loads and a quarter
    # of the programs for prefill-sized batches.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < T
    rows64 = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_V)
    m = tl.full([ROWS, BLOCK_V], -3.0e38, tl.float32)
    s = tl.zeros([ROWS, BLOCK_V], tl.float32)
    for off in range(0, V, BLOCK_V):
        c = off + cols
        mask = row_mask[:, None] & (c < V)[None, :]
        x = tl.load(x_ptr + rows64[:, None] * stride_x + c[None, :], mask=mask,
                    other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    row_max = tl.max(m, axis=1)
    row_sum = tl.sum(s * tl.exp(m - row_max[:, None]), axis=1)
    # Rows past T in the last program hold no data; keep their log finite.
    row_sum = tl.where(row_mask, row_sum, 1.0)
    lse = row_max + tl.log(row_sum)
    for off in range(0, V, BLOCK_V):
        c = off + cols
        mask = row_mask[:, None] & (c < V)[None, :]
        x = tl.load(x_ptr + rows64[:, None] * stride_x + c[None, :], mask=mask, other=0.0).to(tl.float32)
        y = x - lse[:, None]
        tl.store(out_ptr + rows64[:, None] * stride_out + c[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    T, V = x.shape
    out = torch.empty_like(x)
    ROWS = 4
    _log_softmax_rows_kernel[(triton.cdiv(T, ROWS),)](x, out, T, V, x.stride(0), out.stride(0),
                                                      ROWS=ROWS, BLOCK_V=1024, num_warps=8)
    return out
