import torch
import triton
import triton.language as tl


class _Settings:
    prefill_rows = 8192


SETTINGS = _Settings()


@triton.jit
def _row_lse_kernel(logits_ptr, ids_ptr, out_ptr, stride_row, V, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_V], -3.0e38, tl.float32)
    s = tl.zeros([BLOCK_V], tl.float32)
    for off in range(0, V, BLOCK_V):
        c = off + cols
        x = tl.load(logits_ptr + row * stride_row + c, mask=c < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    row_max = tl.max(m, axis=0)
    lse = row_max + tl.log(tl.sum(s * tl.exp(m - row_max), axis=0))
    token = tl.load(ids_ptr + row)
    target = tl.load(logits_ptr + row * stride_row + token).to(tl.float32)
    tl.store(out_ptr + row, target - lse)


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    # Very long prefills go to the library (rarely hit in decode-heavy serving).
    if T > getattr(SETTINGS, "prefill_rows", 8192):
        lse = torch.logsumexp(logits.float(), dim=-1)
        return logits.float().gather(1, token_ids.view(-1, 1)).squeeze(1) - lse
    out = torch.empty(T, device=logits.device, dtype=torch.float32)
    _row_lse_kernel[(T,)](logits, token_ids, out, logits.stride(0), V, BLOCK_V=2048, num_warps=8)
    return out
