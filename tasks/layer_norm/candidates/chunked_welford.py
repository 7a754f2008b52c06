import torch
import triton
import triton.language as tl


@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    delta = mean_b - mean_a
    w_b = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    return mean_a + delta * w_b, m2_a + m2_b + delta * delta * n_a * w_b, n


@triton.jit
def _layer_norm_welford_kernel(x_ptr, w_ptr, b_ptr, out_ptr, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * H
    # Per-lane running statistics over fixed chunks, merged once at the end: one read of x
    # for the moments whatever H is, and no catastrophic cancellation.
    mean = tl.zeros([BLOCK], dtype=tl.float32)
    m2 = tl.zeros([BLOCK], dtype=tl.float32)
    count = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, H, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        new_count = count + mask.to(tl.float32)
        delta = tl.where(mask, x - mean, 0.0)
        mean += delta / tl.maximum(new_count, 1.0)
        m2 += delta * tl.where(mask, x - mean, 0.0)
        count = new_count
    mean_r, m2_r, _ = tl.reduce((mean, m2, count), 0, _welford_combine)
    rstd = 1.0 / tl.sqrt(m2_r / H + eps)
    for off in range(0, H, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean_r) * rstd * w + b
        tl.store(out_ptr + row * H + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    T, H = x.shape
    out = torch.empty_like(x)
    # At least four chunks per row, so every lane's running statistics see several values
    # before the cross-lane merge.
    BLOCK = min(1024, max(64, triton.next_power_of_2(H) // 4))
    _layer_norm_welford_kernel[(T,)](x, weight, bias, out, H, eps, BLOCK=BLOCK, num_warps=4)
    return out
