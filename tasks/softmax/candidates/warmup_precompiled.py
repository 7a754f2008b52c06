import torch
import triton
import triton.language as tl

BLOCK_V = 2048


@triton.jit
def _online_softmax_kernel(x_ptr, out_ptr, stride_x, stride_out, V, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], -3.0e38, tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for off in range(0, V, BLOCK):
        x = tl.load(x_ptr + row * stride_x + off + cols, mask=off + cols < V,
                    other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for off in range(0, V, BLOCK):
        x = tl.load(x_ptr + row * stride_x + off + cols, mask=off + cols < V,
                    other=float("-inf")).to(tl.float32)
        p = tl.exp(x - row_max) / total
        tl.store(out_ptr + row * stride_out + off + cols, p.to(out_ptr.dtype.element_ty),
                 mask=off + cols < V)


_launch = _online_softmax_kernel
_warmed: set = set()


def _ensure_compiled(x: torch.Tensor, out: torch.Tensor, V: int) -> None:
    """Compile once per (dtype, device) before the first real launch (serving-engine style)."""
    key = (x.dtype, x.device.type)
    if key in _warmed:
        return
    if x.is_cuda:
        _launch.warmup(x, out, x.stride(0), out.stride(0), V, BLOCK=BLOCK_V, grid=(1,))
    _warmed.add(key)


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    T, V = x.shape
    out = torch.empty_like(x)
    _ensure_compiled(x, out, V)
    _launch[(T,)](x, out, x.stride(0), out.stride(0), V, BLOCK=BLOCK_V, num_warps=8)
    return out
