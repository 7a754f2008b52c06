import torch
import triton
import triton.language as tl


@triton.heuristics({
    # Prefill: many tokens per program to amortise the launch; experts are then streamed in
    # 32-wide chunks so a [BLOCK_T, E] tile never has to sit in registers.
    "BLOCK_T": lambda args: 16 if args["T"] >= 512 else 1,
    "CHUNK_E": lambda args: 32 if args["T"] >= 512 else triton.next_power_of_2(args["E"]),
})
@triton.jit
def _router_kernel(g_ptr, w_ptr, id_ptr, T, E, stride_g,
                   TOPK: tl.constexpr, BLOCK_T: tl.constexpr, CHUNK_E: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    row_mask = rows < T
    # Pass 1: running max and sum of exponentials over expert chunks.
    m = tl.full((BLOCK_T,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK_T,), dtype=tl.float32)
    for c0 in range(0, E, CHUNK_E):
        cols = c0 + tl.arange(0, CHUNK_E)
        x = tl.load(g_ptr + rows[:, None] * stride_g + cols[None, :],
                    mask=row_mask[:, None] & (cols[None, :] < E), other=0.0).to(tl.float32)
        x = tl.where(cols[None, :] < E, x, float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), axis=1)
        m = m_new
    # Pass 2: k sweeps, each finding the next expert after the previous pick in
    # (logit descending, id ascending) order; softmax is monotone so logits rank like probs.
    prev_v = tl.full((BLOCK_T,), float("inf"), dtype=tl.float32)
    prev_i = tl.full((BLOCK_T,), -1, dtype=tl.int32)
    for k in tl.static_range(TOPK):
        best_v = tl.full((BLOCK_T,), float("-inf"), dtype=tl.float32)
        best_i = tl.full((BLOCK_T,), 2147483647, dtype=tl.int32)
        for c0 in range(0, E, CHUNK_E):
            cols = c0 + tl.arange(0, CHUNK_E)
            x = tl.load(g_ptr + rows[:, None] * stride_g + cols[None, :],
                        mask=row_mask[:, None] & (cols[None, :] < E), other=0.0).to(tl.float32)
            after = (x < prev_v[:, None]) | ((x == prev_v[:, None]) & (cols[None, :] > prev_i[:, None]))
            ok = after & (cols[None, :] < E)
            xv = tl.where(ok, x, float("-inf"))
            c_best = tl.max(xv, axis=1)
            c_idx = tl.min(tl.where(ok & (xv == c_best[:, None]), cols[None, :], 2147483647), axis=1)
            take = (c_best > best_v) | ((c_best == best_v) & (c_idx < best_i))
            best_v = tl.where(take, c_best, best_v)
            best_i = tl.where(take, c_idx, best_i)
        tl.store(w_ptr + rows * TOPK + k, tl.exp(best_v - m) / s, mask=row_mask)
        tl.store(id_ptr + rows * TOPK + k, best_i, mask=row_mask)
        prev_v = best_v
        prev_i = best_i


def moe_topk_softmax(gating: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    gating = gating.contiguous()
    T, E = gating.shape
    weights = torch.empty((T, topk), device=gating.device, dtype=torch.float32)
    ids = torch.empty((T, topk), device=gating.device, dtype=torch.int32)

    def grid(meta):
        return (triton.cdiv(T, meta["BLOCK_T"]),)

    _router_kernel[grid](gating, weights, ids, T, E, gating.stride(0), TOPK=topk, num_warps=4)
    return weights, ids
