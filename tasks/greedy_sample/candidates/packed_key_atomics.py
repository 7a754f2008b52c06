import torch
import triton
import triton.language as tl


@triton.jit
def _orderable(x):
    # float32 bits as a signed int32 that orders like the float (negative values flipped).
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _split_argmax_kernel(logits_ptr, keys_ptr, tickets_ptr, out_ptr, stride_row, V, CHUNK,
                         SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    start = part * CHUNK
    cols = tl.arange(0, BLOCK)
    best = tl.full([BLOCK], -2147483648, tl.int32)
    where = tl.zeros([BLOCK], tl.int32)
    for off in range(0, CHUNK, BLOCK):
        idx = start + off + cols
        mask = (idx < V) & (off + cols < CHUNK)
        x = tl.load(logits_ptr + row * stride_row + idx, mask=mask, other=float("-inf"))
        key = tl.where(mask, _orderable(x.to(tl.float32)), -2147483648)
        take = key > best
        best = tl.where(take, key, best)
        where = tl.where(take, idx, where)
    top = tl.max(best, axis=0)
    first = tl.min(tl.where(best == top, where, V), axis=0)
    # Pack (value, inverted index) into one int64: the integer max keeps the largest value and,
    # among equal values, the lowest index, whatever order the programs arrive in.
    packed = (top.to(tl.int64) << 32) | (2147483647 - first).to(tl.int64)
    tl.atomic_max(keys_ptr + row, packed)
    # The last program of a row to arrive publishes the winner.
    ticket = tl.atomic_add(tickets_ptr + row, 1)
    if ticket == SPLIT - 1:
        final = tl.atomic_xchg(keys_ptr + row, packed)
        final = tl.maximum(final, packed)
        tl.store(out_ptr + row, 2147483647 - (final & 2147483647))


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def greedy_sample(logits: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    out = torch.empty(T, device=logits.device, dtype=torch.int64)
    # Split the vocabulary so that small decode batches still fill the GPU; the int64 max is exact.
    split = max(1, min(32, _num_sms(logits.device) // max(T, 1)))
    chunk = triton.cdiv(triton.cdiv(V, split), 256) * 256
    split = triton.cdiv(V, chunk)
    keys = torch.full((T,), -(2**63), device=logits.device, dtype=torch.int64)
    tickets = torch.zeros((T,), device=logits.device, dtype=torch.int32)
    _split_argmax_kernel[(T, split)](logits, keys, tickets, out, logits.stride(0), V, chunk,
                                     SPLIT=split, BLOCK=min(1024, triton.next_power_of_2(chunk)), num_warps=4)
    return out
