import torch
import triton
import triton.language as tl


@triton.jit
def _slice_argmax_kernel(logits_ptr, key_ptr, idx_ptr, stride_row, V, SLICE_COLS,
                         N_SLICES: tl.constexpr, SLICE_BITS: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    sl = tl.program_id(1)
    start = sl * SLICE_COLS
    cols = tl.arange(0, BLOCK_V)
    best_val = tl.full([BLOCK_V], float("-inf"), tl.float32)
    best_idx = tl.full([BLOCK_V], 2147483647, tl.int32)
    for off in range(0, SLICE_COLS, BLOCK_V):
        c = start + off + cols
        valid = (c < V) & (off + cols < SLICE_COLS)
        x = tl.load(logits_ptr + row * stride_row + c, mask=valid, other=float("-inf")).to(tl.float32)
        take = (x > best_val) & valid
        best_val = tl.where(take, x, best_val)
        best_idx = tl.where(take, c, best_idx)
    m = tl.max(best_val, axis=0)
    tl.store(idx_ptr + row * N_SLICES + sl, tl.min(tl.where(best_val == m, best_idx, 2147483647), axis=0))
    # Order-preserving int32 image of the float, with the slice id in the low SLICE_BITS bits
    # (inverted, so among equal values the first slice wins). Logits from a bf16 lm_head have
    # 16 zero mantissa bits, so the slice id costs no precision. One atomic_max per slice
    # replaces a second reduction kernel.
    bits = m.to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    key = ((key >> SLICE_BITS) << SLICE_BITS) | (N_SLICES - 1 - sl)
    tl.atomic_max(key_ptr + row, key)


@triton.jit
def _gather_kernel(key_ptr, idx_ptr, out_ptr, N_SLICES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    key = tl.load(key_ptr + row)
    sl = N_SLICES - 1 - (key & (N_SLICES - 1))
    tl.store(out_ptr + row, tl.load(idx_ptr + row * N_SLICES + sl).to(tl.int64))


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def greedy_sample(logits: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    T, V = logits.shape
    # Decode batches cannot fill the GPU with one program per row: cut rows into slices until
    # about two waves of programs are in flight.
    n_slices = 1
    while T * n_slices < 2 * _num_sms(logits.device) and n_slices < 32 and V // (2 * n_slices) >= 128:
        n_slices *= 2
    slice_bits = n_slices.bit_length() - 1
    BLOCK_V = min(4096, triton.next_power_of_2(triton.cdiv(V, n_slices)))
    slice_cols = triton.cdiv(triton.cdiv(V, n_slices), BLOCK_V) * BLOCK_V
    keys = torch.full((T,), -2**31, device=logits.device, dtype=torch.int32)
    idxs = torch.empty(T, n_slices, device=logits.device, dtype=torch.int32)
    out = torch.empty(T, device=logits.device, dtype=torch.int64)
    _slice_argmax_kernel[(T, n_slices)](logits, keys, idxs, logits.stride(0), V, slice_cols,
                                        N_SLICES=n_slices, SLICE_BITS=slice_bits, BLOCK_V=BLOCK_V,
                                        num_warps=8)
    _gather_kernel[(T,)](keys, idxs, out, N_SLICES=n_slices, num_warps=1)
    return out
