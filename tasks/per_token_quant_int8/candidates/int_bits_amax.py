import torch
import triton
import triton.language as tl


@triton.jit
def _rint(v):
    # Round half to even (as torch.round) via the 1.5 * 2**23 trick; exact for |v| < 2**22.
    return (v + 12582912.0) - 12582912.0


@triton.jit
def _amax_bits_kernel(x_ptr, bits_ptr, tickets_ptr, scale_ptr, stride_x, H, CHUNK,
                      SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    start = part * CHUNK
    m = tl.zeros((BLOCK,), dtype=tl.float32)
    for off in range(0, CHUNK, BLOCK):
        cols = start + off + tl.arange(0, BLOCK)
        mask = (cols < H) & (off + tl.arange(0, BLOCK) < CHUNK)
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        m = tl.maximum(m, tl.abs(x))
    # Non-negative float32 values order like their bit patterns read as int32.
    bits = tl.max(m, axis=0).to(tl.int32, bitcast=True)
    tl.atomic_max(bits_ptr + row, bits)
    ticket = tl.atomic_add(tickets_ptr + row, 1)
    if ticket == SPLIT - 1:
        amax_bits = tl.atomic_xchg(bits_ptr + row, bits)
        amax = tl.maximum(amax_bits, bits).to(tl.float32, bitcast=True)
        tl.store(scale_ptr + row, tl.math.div_rn(tl.maximum(amax, 1e-10), 127.0))


@triton.jit
def _quant_kernel(x_ptr, scale_ptr, q_ptr, stride_x, stride_q, H, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    scale = tl.load(scale_ptr + row)
    for off in range(0, H, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        q = _rint(tl.math.div_rn(x, scale))
        q = tl.minimum(tl.maximum(q, -127.0), 127.0)
        tl.store(q_ptr + row * stride_q + cols, q.to(tl.int8), mask=mask)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def per_token_quant_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.contiguous()
    T, H = x.shape
    q = torch.empty((T, H), device=x.device, dtype=torch.int8)
    scale = torch.empty((T,), device=x.device, dtype=torch.float32)
    bits = torch.zeros((T,), device=x.device, dtype=torch.int32)
    tickets = torch.zeros((T,), device=x.device, dtype=torch.int32)
    split = 1
    while T * split < _num_sms(x.device) and split < 16 and triton.cdiv(H, split * 2) >= 64:
        split *= 2
    chunk = triton.cdiv(triton.cdiv(H, split), 64) * 64
    split = triton.cdiv(H, chunk)
    block = min(1024, triton.next_power_of_2(chunk))
    _amax_bits_kernel[(T, split)](x, bits, tickets, scale, x.stride(0), H, chunk,
                                  SPLIT=split, BLOCK=block, num_warps=4)
    _quant_kernel[(T,)](x, scale, q, x.stride(0), q.stride(0), H, BLOCK=1024, num_warps=4)
    return q, scale
