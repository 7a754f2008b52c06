import torch
import triton
import triton.language as tl


@triton.jit
def _fused_add_rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, T, H, eps,
                               BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * H
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, H, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(res_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        s = (x + r).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + base + cols, s, mask=mask)
        s = s.to(tl.float32)
        acc += s * s
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / H + eps)
    for off in range(0, H, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < H
        s = tl.load(res_out_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + base + cols, (s * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


# The best chunk width and warp count differ between decode (latency-bound, few rows) and
# prefill (bandwidth-bound): tune per number of rows.
_CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w)
            for b, w in [(512, 4), (1024, 4), (2048, 8), (4096, 8), (8192, 16)]]
_fused_add_rms_norm_tuned = triton.autotune(configs=_CONFIGS, key=["T", "H"])(_fused_add_rms_norm_kernel)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    x = x.contiguous()
    residual = residual.contiguous()
    T, H = x.shape
    out = torch.empty_like(x)
    residual_out = torch.empty_like(x)
    if x.is_cuda:
        _fused_add_rms_norm_tuned[(T,)](x, residual, weight, out, residual_out, T, H, eps)
    else:
        # No benchmarker off-GPU (Triton's interpreter): run the kernel with a middle config.
        _fused_add_rms_norm_kernel[(T,)](x, residual, weight, out, residual_out, T, H, eps,
                                         BLOCK=min(1024, triton.next_power_of_2(H)), num_warps=4)
    return out, residual_out
