import torch
import triton
import triton.language as tl


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


_blocks: dict = {}


def _prepare(x: torch.Tensor, out: torch.Tensor, T: int, V: int) -> int:
    """Pick and precompile the block for this problem once; later calls reuse it."""
    key = (T, V, x.dtype)
    if key not in _blocks:
        # Decode: one wide block per row; prefill: narrower blocks, more programs resident.
        block = 4096 if T <= 100 else 512
        if x.is_cuda:
            _online_softmax_kernel.warmup(x, out, x.stride(0), out.stride(0), V, BLOCK=block, grid=(1,))
        _blocks[key] = block
    return _blocks[key]


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    T, V = x.shape
    out = torch.empty_like(x)
    block = _prepare(x, out, T, V)
    _online_softmax_kernel[(T,)](x, out, x.stride(0), out.stride(0), V, BLOCK=block, num_warps=8)
    return out
