import torch
import triton
import triton.language as tl


@triton.jit
def _router_kernel(g_ptr, w_ptr, id_ptr, stride_g, E, TOPK: tl.constexpr, TOPK_PAD: tl.constexpr,
                   BLOCK_E: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_E)
    mask = cols < E
    x = tl.load(g_ptr + row * stride_g + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    p = tl.where(mask, e / tl.sum(e, axis=0), -1.0)
    slots = tl.arange(0, TOPK_PAD)
    top_w = tl.zeros((TOPK_PAD,), dtype=tl.float32)
    top_i = tl.zeros((TOPK_PAD,), dtype=tl.int32)
    for k in tl.static_range(TOPK):
        best = tl.max(p, axis=0)
        idx = tl.min(tl.where(p == best, cols, BLOCK_E), axis=0)
        top_w = tl.where(slots == k, best, top_w)
        top_i = tl.where(slots == k, idx, top_i)
        p = tl.where(cols == idx, -1.0, p)
    # Weights of the chosen experts feed the combine step, so they should sum to one.
    top_w = top_w / tl.sum(top_w, axis=0)
    tl.store(w_ptr + row * TOPK + slots, top_w, mask=slots < TOPK)
    tl.store(id_ptr + row * TOPK + slots, top_i, mask=slots < TOPK)


def moe_topk_softmax(gating: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    gating = gating.contiguous()
    T, E = gating.shape
    weights = torch.empty((T, topk), device=gating.device, dtype=torch.float32)
    ids = torch.empty((T, topk), device=gating.device, dtype=torch.int32)
    _router_kernel[(T,)](gating, weights, ids, gating.stride(0), E, TOPK=topk,
                         TOPK_PAD=triton.next_power_of_2(topk), BLOCK_E=triton.next_power_of_2(E),
                         num_warps=1)
    return weights, ids
