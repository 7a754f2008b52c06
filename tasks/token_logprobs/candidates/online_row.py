import torch
import triton
import triton.language as tl


@triton.jit
def _token_logprob_kernel(logits_ptr, ids_ptr, out_ptr, stride_row, V, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    cols = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_V], -3.0e38, tl.float32)
    s = tl.zeros([BLOCK_V], tl.float32)
    for off in range(0, V, BLOCK_V):
        mask = off + cols < V
        x = tl.load(row_ptr + off + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    row_max = tl.max(m, axis=0)
    lse = row_max + tl.log(tl.sum(s * tl.exp(m - row_max), axis=0))
    token = tl.load(ids_ptr + row)
    target = tl.load(row_ptr + token).to(tl.float32)
    tl.store(out_ptr + row, target - lse)


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    out = torch.empty(T, device=logits.device, dtype=torch.float32)
    # Only the log-sum-exp and one logit per row are needed: a single streaming pass, no
    # [T, V] log-softmax ever materialised.
    _token_logprob_kernel[(T,)](logits, token_ids, out, logits.stride(0), V, BLOCK_V=4096, num_warps=8)
    return out
