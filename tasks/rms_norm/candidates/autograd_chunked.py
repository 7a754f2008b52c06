import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_fwd(x_ptr, w_ptr, out_ptr, stride_x, stride_out, H, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], tl.float32)
    for off in range(0, H, CHUNK):
        x = tl.load(x_ptr + row * stride_x + off + cols, mask=off + cols < H, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / H + eps)
    for off in range(0, H, CHUNK):
        mask = off + cols < H
        x = tl.load(x_ptr + row * stride_x + off + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + off + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride_out + off + cols, (x * rstd * w).to(out_ptr.dtype.element_ty),
                 mask=mask)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        x = x.contiguous()
        n_rows, hidden = x.shape
        out = torch.empty_like(x)
        # Many rows: smaller chunks keep registers free for more resident programs.
        chunk = 64 if n_rows >= 64 else triton.next_power_of_2(hidden)
        _rms_norm_fwd[(n_rows,)](x, weight, out, x.stride(0), out.stride(0), hidden, eps,
                                 CHUNK=chunk, num_warps=4)
        ctx.save_for_backward(x, weight)
        return out

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps)
