"""Idioms of library and LLM-written kernels (issue 13): what a batch-dependent choice changes
decides whether it is a finding, and the host analysis follows the ways real code reaches its
kernels (autograd.Function.apply, warmup, module-level aliases, constants folded)."""

import textwrap

from gates.contract import get_task
from gates.static import static_gate

HEADER = "import torch\nimport torch.nn.functional as F\nimport triton\nimport triton.language as tl\n"


def run(body: str, task: str = "rms_norm"):
    return static_gate(HEADER + textwrap.dedent(body), get_task(task))


def errors(body: str, task: str = "rms_norm") -> set[str]:
    return {f.rule for f in run(body, task).findings if f.severity == "error"}


# A row reduction looped in BLOCK-wide chunks (BLOCK shapes the order) behind host code `{host}`.
CHUNKED = textwrap.indent('''
@triton.jit
def _rms(x_ptr, w_ptr, out_ptr, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, H, BLOCK):
        x = tl.load(x_ptr + row * H + off + tl.arange(0, BLOCK), mask=off + tl.arange(0, BLOCK) < H)
        acc += x * x
    tl.store(out_ptr + row, tl.sum(acc, axis=0))
''', "    ")


def test_integer_atomic_protocols_are_not_order_hazards():
    body = '''
    @triton.jit
    def _split_amax(x_ptr, bits_ptr, tickets_ptr, scale_ptr, H, CHUNK, SPLIT: tl.constexpr,
                    BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * CHUNK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0).to(tl.float32)
        bits = tl.max(tl.abs(x), axis=0).to(tl.int32, bitcast=True)
        tl.atomic_max(bits_ptr + row, bits)
        packed = (bits.to(tl.int64) << 32) | row
        tl.atomic_xchg(bits_ptr + row + 1, packed)
        ticket = tl.atomic_add(tickets_ptr + row, 1)
        if ticket == SPLIT - 1:
            last = tl.atomic_xchg(bits_ptr + row, bits)
            tl.store(scale_ptr + row, last.to(tl.float32, bitcast=True) / 127.0)

    def rms_norm(x, weight, eps):
        T, H = x.shape
        split = max(1, 132 // T)
        out = torch.empty_like(x)
        bits = torch.zeros(T, dtype=torch.int32, device=x.device)
        _split_amax[(T, split)](x, bits, bits, out, H, triton.cdiv(H, split), SPLIT=split, BLOCK=256)
        return out
    '''
    assert errors(body) == set()
    floating = body.replace("tl.atomic_xchg(bits_ptr + row + 1, packed)",
                            "tl.atomic_xchg(bits_ptr + row + 1, x * 2.0)")
    assert errors(floating) == {"BI003"}


def test_index_only_and_masking_branches_on_the_batch_are_not_code_paths():
    body = '''
    @triton.jit
    def _rms_rows(x_ptr, out_ptr, T, H, BLOCK: tl.constexpr, USE_INT64: tl.constexpr,
                  EVEN: tl.constexpr):
        row = tl.program_id(0)
        if USE_INT64:
            base = row.to(tl.int64) * H
        else:
            base = row * H
        cols = tl.arange(0, BLOCK)
        if EVEN:
            x = tl.load(x_ptr + base + cols)
        else:
            mask = cols < H
            x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row, tl.sum(x * x, axis=0))

    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _rms_rows[(T,)](x, out, T, H, BLOCK=triton.next_power_of_2(H),
                        USE_INT64=x.numel() >= 2**31, EVEN=T % 16 == 0)
        return out
    '''
    assert errors(body) == set()
    arithmetic = body.replace("x = tl.load(x_ptr + base + cols)\n",
                              "x = tl.load(x_ptr + base + cols) * 1.0001\n")
    assert errors(arithmetic) == {"BI004"}


def test_flat_persistent_loop_that_resets_its_accumulator_per_tile():
    body = '''
    @triton.jit
    def _persistent(x_ptr, out_ptr, M, K, NUM_SMS: tl.constexpr, BLOCK_K: tl.constexpr):
        k_tiles = tl.cdiv(K, BLOCK_K)
        tiles = tl.cdiv(M, 16) // NUM_SMS
        tile = tl.program_id(0) - NUM_SMS
        ki = -1
        acc = tl.zeros((16,), dtype=tl.float32)
        for _ in range(0, k_tiles * tiles):
            ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
            if ki == 0:
                tile += NUM_SMS
            acc += tl.sum(tl.load(x_ptr + tile * K + ki * BLOCK_K + tl.arange(0, BLOCK_K)), axis=0)
            if ki == k_tiles - 1:
                tl.store(out_ptr + tile, acc)
                acc = tl.zeros_like(acc)

    def linear(x, weight, bias):
        M, K = x.shape
        out = torch.empty((M, 16), device=x.device, dtype=x.dtype)
        _persistent[(4,)](x, out, M, K, NUM_SMS=4, BLOCK_K=32)
        return out
    '''
    assert errors(body, "linear") == set()
    carried = body.replace("acc = tl.zeros_like(acc)", "pass")
    assert errors(carried, "linear") == {"BI001"}


def test_autograd_function_apply_is_followed():
    body = CHUNKED + '''
    class _Norm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            n_rows, hidden = x.shape
            out = torch.empty_like(x)
            _rms[(n_rows,)](x, weight, out, hidden, eps, BLOCK=64 if n_rows >= 64 else 256)
            ctx.save_for_backward(x)
            return out

    _norm = _Norm.apply

    def rms_norm(x, weight, eps):
        return _norm(x, weight, eps)
    '''
    assert errors(body) == {"BI001"}


def test_warmup_binds_the_constexprs_of_later_launches():
    body = CHUNKED + '''
    _blocks = {}

    def _prepare(x, out, T, H, eps):
        key = (T, H)
        if key not in _blocks:
            block = 1024 if T <= 100 else 128
            _rms.warmup(x, x, out, H, eps, BLOCK=block, grid=(1,))
            _blocks[key] = block
        return _blocks[key]

    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _rms[(T,)](x, weight, out, H, eps, BLOCK=_prepare(x, out, T, H, eps))
        return out
    '''
    found = run(body).findings
    assert {f.rule for f in found} == {"BI001"}, found
    fixed = body.replace("1024 if T <= 100 else 128", "1024")
    assert errors(fixed) == set()


def test_a_module_alias_keeps_the_library_function_the_entry_later_shadows():
    body = '''
    from torch.nn.functional import log_softmax

    _library = log_softmax

    def log_softmax(x):
        if x.shape[0] > 48:
            return _library(x.float(), dim=-1)
        return x - x.amax(-1, keepdim=True)
    '''
    found = run(body, "log_softmax").findings
    assert "BI004" in {f.rule for f in found}
    assert any("torch.nn.functional.log_softmax" in f.message or "log_softmax`" in f.message
               for f in found if f.rule == "BI004"), found


def test_generic_dim_helpers_and_literal_arguments_are_folded():
    body = CHUNKED + '''
    def _norm_any(x, weight, eps, dim=-1, use_native=False):
        if use_native:
            return F.rms_norm(x, (x.shape[dim],), weight, eps)
        dim = dim % x.ndim
        n = x.shape[dim]
        x2 = x.reshape(-1, n)
        out = torch.empty_like(x2)
        _rms[(x2.shape[0],)](x2, weight, out, n, eps, BLOCK=triton.next_power_of_2(n))
        return out

    def rms_norm(x, weight, eps):
        return _norm_any(x, weight, eps, dim=-1, use_native=False)
    '''
    assert run(body).findings == []


def test_possible_hazards_are_warnings_and_proved_ones_errors():
    vendor = ("def rms_norm(x, weight, eps):\n"
              "    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)\n")
    result = run(vendor)
    assert result.passed and [(f.rule, f.severity) for f in result.findings] == [("BI005", "warning")]
    assert "possible hazard" in result.findings[0].message
    beyond = vendor.replace("return x", "if x.shape[0] > 8192:\n        return x.float()\n    return x")
    assert errors(beyond) == {"BI004"}


def test_kernels_and_helpers_imported_from_a_sibling_module_are_followed(tmp_path):
    (tmp_path / "norm_kernels.py").write_text(HEADER + textwrap.dedent(CHUNKED) + textwrap.dedent('''
    def launch_rms(x, weight, out, eps):
        T, H = x.shape
        _rms[(T,)](x, weight, out, H, eps, BLOCK=64 if T >= 64 else 256)
    '''))
    candidate = tmp_path / "candidate.py"
    candidate.write_text(HEADER + textwrap.dedent('''
    from .norm_kernels import launch_rms as _launch

    def rms_norm(x, weight, eps):
        out = torch.empty_like(x)
        _launch(x, weight, out, eps)
        return out
    '''))
    result = static_gate(candidate.read_text(), get_task("rms_norm"), str(candidate))
    assert {f.rule for f in result.findings} == {"BI001"}
    (tmp_path / "norm_kernels.py").write_text(
        (tmp_path / "norm_kernels.py").read_text().replace("64 if T >= 64 else 256", "256"))
    assert static_gate(candidate.read_text(), get_task("rms_norm"), str(candidate)).findings == []


def test_getattr_with_a_constant_name_is_an_attribute():
    body = '''
    def log_softmax(x):
        if x.shape[0] > getattr(torch, "agentloop_threshold", 8192):
            return getattr(F, "log_softmax")(x.float(), dim=-1)
        return x - x.amax(-1, keepdim=True)
    '''
    found = run(body, "log_softmax").findings
    assert {f.rule for f in found} == {"BI004", "BI005"}
    assert any("8192" in f.message for f in found if f.rule == "BI004"), found


def test_twin_kernels_that_differ_only_in_indexing_are_one_code_path():
    kernel = '''
    @triton.jit
    def _silu_{name}(x_ptr, out_ptr, T, I, BLOCK: tl.constexpr):
        row = tl.program_id(0){widen}
        cols = tl.arange(0, BLOCK)
        mask = cols < I
        gate = tl.load(x_ptr + row * 2 * I + cols, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(x_ptr + row * 2 * I + I + cols, mask=mask, other=0.0).to(tl.float32)
        y = gate * tl.sigmoid(gate) * up{extra}
        tl.store(out_ptr + row * I + cols, y, mask=mask)
    '''
    host = '''
    def silu_and_mul(x):
        T, I2 = x.shape
        out = torch.empty((T, I2 // 2), device=x.device, dtype=x.dtype)
        if x.numel() >= 2**31:
            _silu_i64[(T,)](x, out, T, I2 // 2, BLOCK=triton.next_power_of_2(I2 // 2))
        else:
            _silu_i32[(T,)](x, out, T, I2 // 2, BLOCK=triton.next_power_of_2(I2 // 2))
        return out
    '''
    twins = (kernel.format(name="i64", widen=".to(tl.int64)", extra="")
             + kernel.format(name="i32", widen="", extra="") + host)
    assert errors(twins, "silu_and_mul") == set()
    different = (kernel.format(name="i64", widen=".to(tl.int64)", extra=" * 1.0")
                 + kernel.format(name="i32", widen="", extra="") + host)
    assert errors(different, "silu_and_mul") == {"BI004"}


def test_twin_kernels_launched_with_different_reduction_blocks_are_caught():
    twins = "".join(CHUNKED.replace("_rms", name) for name in ("_rms_small", "_rms_large")) + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        if T < 64:
            _rms_small[(T,)](x, weight, out, H, eps, BLOCK=4096)
        else:
            _rms_large[(T,)](x, weight, out, H, eps, BLOCK=512)
        return out
    '''
    assert errors(twins) == {"BI001"}


def test_split_argmax_paths_that_only_select_are_one_code_path():
    """A single-block and a looping path chosen from T, a max-combine tl.reduce whose block comes
    from T, and the winning position packed into an int64 key: all exact, no finding. The same
    kernel rounding on one path (a scaled value) is a code path chosen by the batch."""
    body = '''
    @triton.jit
    def _max_f(a, b):
        return tl.maximum(a, b)

    @triton.jit
    def _argmax(x_ptr, keys_ptr, out_ptr, V, CHUNK, SINGLE: tl.constexpr, R: tl.constexpr):
        row = tl.program_id(0)
        start = tl.program_id(1) * CHUNK
        offs = start + tl.arange(0, R)
        if SINGLE:
            v = tl.load(x_ptr + row * V + offs, mask=offs < V, other=float("-inf"))
            m = tl.reduce(v, 0, _max_f)
            idx = tl.min(tl.where(v == m, offs, 2147483647), axis=0)
        else:
            best = tl.full([R], float("-inf"), tl.float32)
            at = tl.zeros([R], tl.int32)
            for it in range(0, CHUNK // R):
                v = tl.load(x_ptr + row * V + offs + it * R, mask=offs + it * R < V, other=float("-inf"))
                up = v > best
                best = tl.where(up, v, best)
                at = tl.where(up, it, at)
            m = tl.max(best, axis=0)
            idx = tl.min(tl.where(best == m, start + at * R + tl.arange(0, R), 2147483647), axis=0)
        key = (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (2147483647 - idx).to(tl.int64)
        tl.atomic_max(keys_ptr + row, key)

    def greedy_sample(logits):
        T, V = logits.shape
        out = torch.empty(T, dtype=torch.int64, device=logits.device)
        keys = torch.full((T,), -2**62, dtype=torch.int64, device=logits.device)
        split = max(1, 64 // T)
        chunk = triton.cdiv(V, split)
        R = 1024 if T < 8 else 256
        _argmax[(T, split)](logits, keys, out, V, chunk, SINGLE=chunk <= R, R=R)
        return out
    '''
    assert errors(body, "greedy_sample") == set()
    rounding = body.replace("m = tl.reduce(v, 0, _max_f)", "m = tl.reduce(v, 0, _max_f) * 1.0")
    assert errors(rounding, "greedy_sample") == {"BI004"}
    summed = body.replace("return tl.maximum(a, b)", "return a + b")
    assert "BI001" in errors(summed, "greedy_sample")
