import torch
import triton
import triton.language as tl


@triton.jit
def _rint(v):
    # Round half to even (as torch.round) via the 1.5 * 2**23 trick; exact for |v| < 2**22.
    return (v + 12582912.0) - 12582912.0


@triton.jit
def _chunk_amax_kernel(x_ptr, amax_ptr, stride_x, H, CHUNK, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    start = part * CHUNK
    m = tl.zeros((BLOCK,), dtype=tl.float32)
    for off in range(0, CHUNK, BLOCK):
        cols = start + off + tl.arange(0, BLOCK)
        mask = (cols < H) & (cols < start + CHUNK)
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        m = tl.maximum(m, tl.abs(x))
    tl.atomic_max(amax_ptr + row, tl.max(m, axis=0))


@triton.jit
def _chunk_quant_kernel(x_ptr, amax_ptr, q_ptr, scale_ptr, stride_x, stride_q, H, CHUNK,
                        BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    amax = tl.maximum(tl.load(amax_ptr + row), 1e-10)
    scale = tl.math.div_rn(amax, 127.0)
    start = part * CHUNK
    for off in range(0, CHUNK, BLOCK):
        cols = start + off + tl.arange(0, BLOCK)
        mask = (cols < H) & (cols < start + CHUNK)
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        q = _rint(tl.math.div_rn(x, scale))
        q = tl.minimum(tl.maximum(q, -127.0), 127.0)
        tl.store(q_ptr + row * stride_q + cols, q.to(tl.int8), mask=mask)
    if part == 0:
        tl.store(scale_ptr + row, scale)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def per_token_quant_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.contiguous()
    T, H = x.shape
    q = torch.empty((T, H), device=x.device, dtype=torch.int8)
    scale = torch.empty((T,), device=x.device, dtype=torch.float32)
    # |x| >= 0, so a zero start is neutral for the float atomic max.
    amax = torch.zeros((T,), device=x.device, dtype=torch.float32)
    BLOCK = 1024
    # Decode batches leave most SMs idle with one program per row: cut each row into chunks
    # until the grid covers the GPU.
    split = 1
    while T * split < _num_sms(x.device) and split < 16 and triton.cdiv(H, split * 2) >= 64:
        split *= 2
    chunk = triton.cdiv(triton.cdiv(H, split), 64) * 64
    split = triton.cdiv(H, chunk)
    BLOCK = min(BLOCK, triton.next_power_of_2(chunk))
    _chunk_amax_kernel[(T, split)](x, amax, x.stride(0), H, chunk, BLOCK=BLOCK, num_warps=4)
    _chunk_quant_kernel[(T, split)](x, amax, q, scale, x.stride(0), q.stride(0), H, chunk,
                                    BLOCK=BLOCK, num_warps=4)
    return q, scale
