import torch
import triton
import triton.language as tl


@triton.jit
def _topk_softmax_kernel(g_ptr, w_ptr, id_ptr, stride_g, E,
                         TOPK: tl.constexpr, BLOCK_E: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_E)
    mask = cols < E
    x = tl.load(g_ptr + row * stride_g + cols, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    p = e / tl.sum(e, axis=0)
    # Padding lanes sit below every probability so they are never selected.
    p = tl.where(mask, p, -1.0)
    for k in tl.static_range(TOPK):
        best = tl.max(p, axis=0)
        # Lowest expert id among equal probabilities.
        idx = tl.min(tl.where(p == best, cols, BLOCK_E), axis=0)
        tl.store(w_ptr + row * TOPK + k, best)
        tl.store(id_ptr + row * TOPK + k, idx.to(tl.int32))
        p = tl.where(cols == idx, -1.0, p)


def moe_topk_softmax(gating: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    gating = gating.contiguous()
    T, E = gating.shape
    weights = torch.empty((T, topk), device=gating.device, dtype=torch.float32)
    ids = torch.empty((T, topk), device=gating.device, dtype=torch.int32)
    BLOCK_E = triton.next_power_of_2(E)
    _topk_softmax_kernel[(T,)](gating, weights, ids, gating.stride(0), E,
                               TOPK=topk, BLOCK_E=BLOCK_E, num_warps=1 if BLOCK_E <= 128 else 2)
    return weights, ids
