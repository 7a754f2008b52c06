import torch
import triton
import triton.language as tl


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    group_size = GROUP_M * num_pid_n
    first_m = (tile_id // group_size) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % group_size) % rows_in_group
    pid_n = (tile_id % group_size) // rows_in_group
    return pid_m, pid_n


@triton.jit
def _persistent_linear_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K,
                              stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                              NUM_SMS: tl.constexpr, HAS_BIAS: tl.constexpr,
                              UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # Each program walks output tiles with a stride of the grid size (one wave, no tail).
    for tile_id in range(start, num_tiles, NUM_SMS):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_m = tl.max_contiguous(tl.multiple_of(offs_m, BLOCK_M), BLOCK_M)
        offs_n = tl.max_contiguous(tl.multiple_of(offs_n, BLOCK_N), BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(0, k_tiles):
            offs_k = kt * BLOCK_K + tl.arange(0, BLOCK_K)
            a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                        mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
            b = tl.load(w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                        mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        if HAS_BIAS:
            acc += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
                 acc.to(out_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    M, K = x.shape
    N = weight.shape[0]
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if x.dtype == torch.float32:
        BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages = 64, 64, 32, 4, 3
    else:
        BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages = 128, 128, 64, 8, 4
    num_tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    num_sms = _num_sms(x.device)
    _persistent_linear_kernel[(min(num_sms, num_tiles),)](
        x, weight, bias if bias is not None else out, out, M, N, K,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), out.stride(0), out.stride(1),
        NUM_SMS=num_sms, HAS_BIAS=bias is not None, UPCAST=x.device.type != "cuda",
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8,
        num_warps=num_warps, num_stages=num_stages)
    return out
