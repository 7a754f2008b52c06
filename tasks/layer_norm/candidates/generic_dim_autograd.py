import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _layer_norm_fwd(x_ptr, w_ptr, b_ptr, out_ptr, stride_x, stride_out, N, eps,
                    BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
    y = xc * rstd * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y += tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def layer_norm_any_dim(x, weight, bias=None, eps=1e-5, dim=-1, use_native=False):
    """LayerNorm over `dim` of a tensor of any rank (library style)."""
    if use_native:
        return F.layer_norm(x, (x.shape[dim],), weight, bias, eps)
    dim = dim % x.ndim
    n = x.shape[dim]
    if dim != x.ndim - 1:
        x = x.movedim(dim, -1)
    shape = x.shape
    x2 = x.reshape(-1, n).contiguous()
    rows = x2.shape[0]
    out = torch.empty_like(x2)
    block = triton.next_power_of_2(n)
    if block > 65536:
        raise ValueError(f"hidden size {n} is too large for one block")
    _layer_norm_fwd[(rows,)](x2, weight, bias if bias is not None else weight, out,
                             x2.stride(0), out.stride(0), n, eps,
                             BLOCK_N=block, HAS_BIAS=bias is not None,
                             num_warps=min(max(block // 256, 1), 8))
    return out.view(shape)


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        out = layer_norm_any_dim(x, weight, bias, eps, dim=-1, use_native=False)
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return out

    @staticmethod
    def backward(ctx, grad_out):
        raise NotImplementedError("inference only")


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return LayerNormFunction.apply(x, weight, bias, eps)
