"""What the host analysis knows about torch operations, by name.

Vendor GEMMs and floating-point reductions pick their kernel (tiles, split-K, split reductions)
from the problem size, so their rows' reduction order depends on the batch. Exact ops (max,
argmax, sort, gathers) and elementwise ops do not. Layout and allocation ops change no values.
"""

from __future__ import annotations

# Library kernels that multiply-accumulate (cuBLAS / cuDNN / flash attention).
GEMMS = {"matmul", "mm", "addmm", "bmm", "baddbmm", "addbmm", "linear", "einsum", "tensordot",
         "scaled_dot_product_attention", "addmv", "mv", "chain_matmul", "multi_dot", "bilinear",
         "conv1d", "conv2d", "conv3d", "_scaled_mm", "inner", "dot", "vdot", "__matmul__",
         "flash_attn_func", "flash_attn_with_kvcache"}

# Floating-point reductions with a size-dependent strategy; value = position of `dim` when given
# positionally to the method form (the function form takes the tensor first, so one more).
REDUCTIONS = {"sum": 0, "mean": 0, "nansum": 0, "nanmean": 0, "var": 0, "std": 0, "var_mean": 0,
              "std_mean": 0, "prod": 0, "softmax": 0, "log_softmax": 0, "softmin": 0, "logsumexp": 0,
              "cumsum": 0, "cumprod": 0, "logcumsumexp": 0, "norm": 1, "vector_norm": 1,
              "layer_norm": None, "rms_norm": None, "group_norm": None, "normalize": None,
              "cross_entropy": None, "nll_loss": None, "kl_div": None, "mse_loss": None,
              "cosine_similarity": None, "trace": None, "matrix_norm": None, "renorm": None,
              "batch_norm": None, "instance_norm": None}

# Reductions that keep the reduced axis (a scan or a normalisation along `dim`).
SHAPE_KEEPING = {"softmax", "log_softmax", "softmin", "cumsum", "cumprod", "logcumsumexp", "normalize",
                 "layer_norm", "rms_norm", "group_norm", "cummax", "cummin", "sort", "argsort"}

# Reductions that are exact whatever the order (selection, comparison, counting).
EXACT = {"max": 0, "min": 0, "amax": 0, "amin": 0, "argmax": 0, "argmin": 0, "aminmax": None,
         "topk": 1, "sort": 0, "argsort": 0, "kthvalue": 1, "median": 0, "nanmedian": 0, "mode": 0,
         "any": 0, "all": 0, "count_nonzero": 0, "cummax": 0, "cummin": 0, "unique": None,
         "quantile": 1, "nanquantile": 1}

# Calls that allocate, view, move or convert without computing across elements.
LAYOUT = {"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
          "empty_strided", "new_empty", "new_zeros", "new_ones", "new_full", "contiguous", "view",
          "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "expand", "expand_as", "permute",
          "transpose", "t", "narrow", "select", "split", "chunk", "unbind", "clone", "detach", "to",
          "float", "half", "bfloat16", "double", "int", "long", "size", "stride", "numel", "dim",
          "item", "tolist", "data_ptr", "is_contiguous", "element_size", "copy_", "fill_", "zero_",
          "as_strided", "arange", "tensor", "as_tensor", "cuda", "cpu", "type", "view_as",
          "reshape_as", "movedim", "device", "get_device", "is_floating_point", "storage_offset",
          "dtype", "requires_grad_", "contiguous_", "stack", "cat", "concat", "empty_cache",
          "device_count", "current_device", "get_device_properties", "is_available", "synchronize",
          "cdiv", "next_power_of_2", "no_grad", "inference_mode", "Stream", "stream"}

ALLOCATORS = {"empty", "zeros", "ones", "full", "empty_strided", "rand", "randn", "randint", "arange",
              "new_empty", "new_zeros", "new_ones", "new_full"}
LIKE = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like"}
KEEP_TENSOR = {"contiguous", "clone", "detach", "to", "float", "half", "bfloat16", "double", "cuda",
               "cpu", "type", "requires_grad_", "copy_", "fill_", "zero_", "view_as", "reshape_as",
               "masked_fill", "masked_fill_", "clamp", "clamp_", "abs", "neg", "exp", "log", "sqrt",
               "rsqrt", "sigmoid", "silu", "relu", "gelu", "tanh", "pow", "mul", "add", "sub", "div",
               "round", "sign", "reciprocal", "square", "float_power"}
INTEGER_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "long", "int", "short", "bool"}
FLOAT_CASTS = {"float", "half", "bfloat16", "double"}


def is_torch_function(qualified: str) -> bool:
    """Whether a dotted name is a torch function the analysis models by name (`torch.matmul`,
    `torch.nn.functional.linear`, `torch._C._nn.linear`) rather than by reading its source; the
    device and library utilities (`torch.cuda.*`, `torch.library.*`) are not."""
    return qualified.startswith("torch.") and not qualified.startswith(("torch.cuda", "torch.library"))
