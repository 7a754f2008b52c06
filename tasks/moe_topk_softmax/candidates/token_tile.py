import torch
import triton
import triton.language as tl


@triton.jit
def _router_kernel(g_ptr, w_ptr, id_ptr, T, E, stride_g,
                   TOPK: tl.constexpr, TOPK_PAD: tl.constexpr, BLOCK_T: tl.constexpr,
                   BLOCK_E: tl.constexpr):
    # A tile of BLOCK_T tokens per program.
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_mask = rows < T
    col_mask = cols < E
    x = tl.load(g_ptr + rows[:, None] * stride_g + cols[None, :],
                mask=row_mask[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
    x = tl.where(col_mask[None, :], x, float("-inf"))
    m = tl.max(x, axis=1)
    e = tl.exp(x - m[:, None])
    p = e / tl.sum(e, axis=1)[:, None]
    p = tl.where(col_mask[None, :], p, -1.0)

    slots = tl.arange(0, TOPK_PAD)
    top_w = tl.zeros((BLOCK_T, TOPK_PAD), dtype=tl.float32)
    top_i = tl.zeros((BLOCK_T, TOPK_PAD), dtype=tl.int32)
    for k in tl.static_range(TOPK):
        best = tl.max(p, axis=1)
        idx = tl.min(tl.where(p == best[:, None], cols[None, :], BLOCK_E), axis=1)
        top_w = tl.where(slots[None, :] == k, best[:, None], top_w)
        top_i = tl.where(slots[None, :] == k, idx[:, None], top_i)
        p = tl.where(cols[None, :] == idx[:, None], -1.0, p)
    out_mask = row_mask[:, None] & (slots[None, :] < TOPK)
    tl.store(w_ptr + rows[:, None] * TOPK + slots[None, :], top_w, mask=out_mask)
    tl.store(id_ptr + rows[:, None] * TOPK + slots[None, :], top_i, mask=out_mask)


def moe_topk_softmax(gating: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    gating = gating.contiguous()
    T, E = gating.shape
    weights = torch.empty((T, topk), device=gating.device, dtype=torch.float32)
    ids = torch.empty((T, topk), device=gating.device, dtype=torch.int32)
    BLOCK_E = triton.next_power_of_2(E)
    BLOCK_T = 8
    _router_kernel[(triton.cdiv(T, BLOCK_T),)](
        gating, weights, ids, T, E, gating.stride(0),
        TOPK=topk, TOPK_PAD=triton.next_power_of_2(topk), BLOCK_T=BLOCK_T, BLOCK_E=BLOCK_E, num_warps=4)
    return weights, ids
