import torch
import triton
import triton.language as tl


@triton.jit
def _expert_slice_kernel(g_ptr, part_m_ptr, part_s_ptr, cand_v_ptr, cand_i_ptr, stride_g, E,
                         SPLIT: tl.constexpr, TOPK: tl.constexpr, SLICE: tl.constexpr):
    row = tl.program_id(0)
    sl = tl.program_id(1)
    cols = sl * SLICE + tl.arange(0, SLICE)
    mask = cols < E
    x = tl.load(g_ptr + row * stride_g + cols, mask=mask, other=float("-inf")).to(tl.float32)
    # Softmax statistics of this slice of experts.
    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    tl.store(part_m_ptr + row * SPLIT + sl, m)
    tl.store(part_s_ptr + row * SPLIT + sl, s)
    # Local top-k by logit (softmax is monotone), lowest id first on ties.
    base = (row * SPLIT + sl) * TOPK
    for k in tl.static_range(TOPK):
        best = tl.max(x, axis=0)
        idx = tl.min(tl.where(x == best, cols, 2147483647), axis=0)
        tl.store(cand_v_ptr + base + k, best)
        tl.store(cand_i_ptr + base + k, idx)
        x = tl.where(cols == idx, float("-inf"), x)


@triton.jit
def _merge_kernel(part_m_ptr, part_s_ptr, cand_v_ptr, cand_i_ptr, w_ptr, id_ptr,
                  SPLIT: tl.constexpr, SPLIT_PAD: tl.constexpr, TOPK: tl.constexpr,
                  CAND_PAD: tl.constexpr):
    row = tl.program_id(0)
    offs_s = tl.arange(0, SPLIT_PAD)
    pm = tl.load(part_m_ptr + row * SPLIT + offs_s, mask=offs_s < SPLIT, other=float("-inf"))
    ps = tl.load(part_s_ptr + row * SPLIT + offs_s, mask=offs_s < SPLIT, other=0.0)
    m = tl.max(pm, axis=0)
    denom = tl.sum(ps * tl.exp(pm - m), axis=0)
    offs_c = tl.arange(0, CAND_PAD)
    c_mask = offs_c < SPLIT * TOPK
    v = tl.load(cand_v_ptr + row * SPLIT * TOPK + offs_c, mask=c_mask, other=float("-inf"))
    ids = tl.load(cand_i_ptr + row * SPLIT * TOPK + offs_c, mask=c_mask, other=2147483647)
    for k in tl.static_range(TOPK):
        best = tl.max(v, axis=0)
        idx = tl.min(tl.where(v == best, ids, 2147483647), axis=0)
        tl.store(w_ptr + row * TOPK + k, tl.exp(best - m) / denom)
        tl.store(id_ptr + row * TOPK + k, idx)
        v = tl.where(ids == idx, float("-inf"), v)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def moe_topk_softmax(gating: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    gating = gating.contiguous()
    T, E = gating.shape
    dev = gating.device
    # A handful of decode tokens is a handful of programs: spread each token's experts over
    # several programs and merge their (max, sum, top-k) partials.
    split = 1
    while T * split < _num_sms(dev) and split < 8 and triton.cdiv(E, split * 2) >= topk:
        split *= 2
    slice_ = triton.next_power_of_2(triton.cdiv(E, split))
    split = triton.cdiv(E, slice_)
    part_m = torch.empty((T, split), device=dev, dtype=torch.float32)
    part_s = torch.empty((T, split), device=dev, dtype=torch.float32)
    cand_v = torch.empty((T, split, topk), device=dev, dtype=torch.float32)
    cand_i = torch.empty((T, split, topk), device=dev, dtype=torch.int32)
    _expert_slice_kernel[(T, split)](gating, part_m, part_s, cand_v, cand_i, gating.stride(0), E,
                                     SPLIT=split, TOPK=topk, SLICE=slice_, num_warps=1)
    weights = torch.empty((T, topk), device=dev, dtype=torch.float32)
    ids = torch.empty((T, topk), device=dev, dtype=torch.int32)
    _merge_kernel[(T,)](part_m, part_s, cand_v, cand_i, weights, ids,
                        SPLIT=split, SPLIT_PAD=triton.next_power_of_2(split), TOPK=topk,
                        CAND_PAD=triton.next_power_of_2(split * topk), num_warps=1)
    return weights, ids
