"""Every static rule on small inline candidates: the mechanism it catches and the look-alikes it
must leave alone."""

import textwrap

import pytest

from gates.contract import get_task
from gates.static import RULES, static_gate

HEADER = "import torch\nimport torch.nn.functional as F\nimport triton\nimport triton.language as tl\n"

# A row reduction that loops over H in BLOCK-wide chunks: BLOCK shapes the reduction.
CHUNKED = textwrap.indent('''
@triton.jit
def _rms(x_ptr, w_ptr, out_ptr, T, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, H, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / H + eps)
    for off in range(0, H, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < H, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * H + cols, x * rstd * w, mask=cols < H)
''', "    ")

# ROWS rows per program, each reduced whole along axis 1: ROWS is parallel tiling only.
ROW_TILES = textwrap.indent('''
@triton.jit
def _rms_rows(x_ptr, w_ptr, out_ptr, T, H, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < T) & (cols[None, :] < H)
    x = tl.load(x_ptr + rows[:, None] * H + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / H + eps)
    w = tl.load(w_ptr + cols, mask=cols < H, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * H + cols[None, :], x * rstd[:, None] * w[None, :], mask=mask)
''', "    ")

# A GEMM whose K loop runs whole inside each tile: BLOCK_K shapes the reduction, BLOCK_M/N do not.
GEMM = textwrap.indent('''
@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        a_mask = (rm[:, None] < M) & (rk[None, :] < K)
        b_mask = (rn[None, :] < N) & (rk[:, None] < K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=a_mask, other=0.0)
        b = tl.load(b_ptr + rn[None, :] * K + rk[:, None], mask=b_mask, other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
''', "    ")

GEMM_HOST = textwrap.indent('''
def linear(x, weight, bias):
    M, K = x.shape
    N = weight.shape[0]
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))
    _mm[grid](x, weight, out, M, N, K)
    return out
''', "    ")


def run(body: str, task: str = "rms_norm"):
    return static_gate(HEADER + textwrap.dedent(body), get_task(task))


def line_of(body: str, text: str) -> int:
    """1-based line, in the candidate as run, of the first line containing `text`."""
    lines = (HEADER + textwrap.dedent(body)).splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def rules(body: str, task: str = "rms_norm") -> set[str]:
    return {f.rule for f in run(body, task).findings}


def rms_host(block_expr: str, setup: str = "") -> str:
    host = f'''
def rms_norm(x, weight, eps):
    T, H = x.shape
    out = torch.empty_like(x)
{textwrap.indent(textwrap.dedent(setup), "    ")}
    BLOCK = {block_expr}
    _rms[(T,)](x, weight, out, T, H, eps, BLOCK=BLOCK)
    return out
'''
    return CHUNKED + textwrap.indent(host, "    ")


def test_registry_has_stable_ids_with_titles_and_hints():
    assert set(RULES) == {"BI001", "BI002", "BI003", "BI004", "BI005", "BI006", "BI007", "BI008", "BI009",
                          "BI010", "BI011", "BI012", "BI013"}
    for r in RULES.values():
        assert r.title and len(r.hint) > 40


# -- BI001: batch-derived reduction tiling / split count -------------------------------------
def test_bi001_block_along_reduced_axis_from_batch():
    body = rms_host("256 if T < 64 else 1024")
    result = run(body)
    assert not result.passed
    (finding,) = [f for f in result.findings if f.rule == "BI001"]
    assert "`BLOCK`" in finding.message and "_rms" in finding.message
    assert finding.line == line_of(body, "_rms[(T,)]")


def test_bi001_block_from_reduced_dim_only_is_fine():
    assert rules(rms_host("min(1024, triton.next_power_of_2(H))")) == set()


def test_bi001_split_count_from_batch():
    body = '''
    @triton.jit
    def _partial(x_ptr, part_ptr, H, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        part = tl.program_id(1)
        chunk = tl.cdiv(H, SPLIT)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, chunk, BLOCK):
            cols = part * chunk + off + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0)
            acc += x * x
        tl.store(part_ptr + row * SPLIT + part, tl.sum(acc, axis=0))

    def rms_norm(x, weight, eps):
        T, H = x.shape
        split = 1
        while T * split < 132:
            split *= 2
        part = torch.empty(T, split, device=x.device, dtype=torch.float32)
        _partial[(T, split)](x, part, H, SPLIT=split, BLOCK=256)
        return x * torch.rsqrt(part.sum(-1, keepdim=True) / H + eps) * weight
    '''
    found = run(body)
    assert any(f.rule == "BI001" and "`SPLIT`" in f.message for f in found.findings)


def test_bi001_split_from_program_count_of_batch_derived_grid_axis():
    body = '''
    @triton.jit
    def _partial(x_ptr, part_ptr, H, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        part = tl.program_id(1)
        chunk = tl.cdiv(H, tl.num_programs(1))
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(part * chunk, part * chunk + chunk, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0)
        tl.store(part_ptr + row * 64 + part, tl.sum(acc, axis=0))

    def rms_norm(x, weight, eps):
        T, H = x.shape
        part = torch.zeros(T, 64, device=x.device, dtype=torch.float32)
        _partial[(T, max(1, 64 // T))](x, part, H, BLOCK=256)
        return part
    '''
    assert "BI001" in rules(body)


def test_bi001_split_chosen_through_a_plan_object_returned_per_branch():
    body = '''
    import dataclasses

    @dataclasses.dataclass
    class Plan:
        split_k: int
        block_k: int

    def _plan(m, k):
        if m <= 16:
            return Plan(split_k=min(8, k // 512), block_k=64)
        return Plan(split_k=1, block_k=64)

    @triton.jit
    def _partial(a_ptr, b_ptr, ws_ptr, M, N, K, K_PER_SPLIT, BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_k = tl.program_id(2)
        acc = tl.zeros((16, 16), dtype=tl.float32)
        for k in range(pid_k * K_PER_SPLIT, (pid_k + 1) * K_PER_SPLIT, BLOCK_K):
            rk = k + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + pid_m * K + rk[None, :] + tl.arange(0, 16)[:, None] * K)
            b = tl.load(b_ptr + rk[:, None] + tl.arange(0, 16)[None, :] * K)
            acc += tl.dot(a, b)
        tl.store(ws_ptr + pid_k * M * N + tl.arange(0, 16)[:, None] * N + tl.arange(0, 16)[None, :], acc)

    def linear(x, weight, bias):
        M, K = x.shape
        plan = _plan(M, K)
        ws = torch.empty((plan.split_k, M, weight.shape[0]), device=x.device, dtype=torch.float32)
        _partial[(triton.cdiv(M, 16), 1, plan.split_k)](x, weight, ws, M, weight.shape[0], K,
                                                         K // plan.split_k, BLOCK_K=plan.block_k)
        return ws.sum(dim=0)
    '''
    found = run(body, "linear").findings
    assert [(f.rule, "`K_PER_SPLIT`" in f.message) for f in found] == [("BI001", True)]


def test_bi001_stream_k_work_split_from_the_batch():
    body = '''
    @triton.jit
    def _streamk(a_ptr, b_ptr, c_ptr, M, N, K, iters_per_cta, total_iters, BLOCK_K: tl.constexpr):
        start = tl.program_id(0) * iters_per_cta
        end = tl.minimum(start + iters_per_cta, total_iters)
        k_tiles = tl.cdiv(K, BLOCK_K)
        it = start
        while it < end:
            tile_end = tl.minimum((it // k_tiles + 1) * k_tiles, end)
            acc = tl.zeros((16, 16), dtype=tl.float32)
            for kk in range(it, tile_end):
                rk = (kk % k_tiles) * BLOCK_K + tl.arange(0, BLOCK_K)
                acc += tl.dot(tl.load(a_ptr + rk[None, :] + tl.arange(0, 16)[:, None]),
                              tl.load(b_ptr + rk[:, None] + tl.arange(0, 16)[None, :]))
            tl.store(c_ptr + it + tl.arange(0, 16)[:, None] * N + tl.arange(0, 16)[None, :], acc)
            it = tile_end

    def linear(x, weight, bias):
        M, K = x.shape
        N = weight.shape[0]
        out = torch.empty((M, N), device=x.device, dtype=torch.float32)
        total = triton.cdiv(M, 16) * triton.cdiv(N, 16) * triton.cdiv(K, 64)
        _streamk[(132,)](x, weight, out, M, N, K, triton.cdiv(total, 132), total, BLOCK_K=64)
        return out
    '''
    assert rules(body, "linear") == {"BI001"}


def test_bi001_fixed_chunks_with_batch_derived_program_count_are_fine():
    # Chunks sit at fixed places; more programs only cover more of the (padded) axis.
    body = '''
    @triton.jit
    def _partial(x_ptr, part_ptr, H, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        c = tl.program_id(1)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(c * CHUNK, c * CHUNK + CHUNK, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0)
        tl.store(part_ptr + row * 64 + c, tl.sum(acc, axis=0))

    def rms_norm(x, weight, eps):
        T, H = x.shape
        part = torch.zeros(T, 64, device=x.device, dtype=torch.float32)
        _partial[(T, triton.cdiv(H, 512))](x, part, H, CHUNK=512, BLOCK=256)
        return part
    '''
    assert rules(body) == set()


def test_bi001_num_warps_from_batch_in_a_tl_sum_kernel():
    body = ROW_TILES + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _rms_rows[(T,)](x, weight, out, T, H, eps, ROWS=1, BLOCK=triton.next_power_of_2(H),
                        num_warps=4 if T < 32 else 8)
        return out
    '''
    assert "BI001" in rules(body)


def test_bi001_grid_and_row_tiling_from_batch_are_fine():
    # The tricky negative: the batch picks the grid and rows per program, never the reduction.
    body = ROW_TILES + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        if T >= 1024:
            rows = 4
        else:
            rows = 1
        grid = (triton.cdiv(T, rows),)
        _rms_rows[grid](x, weight, out, T, H, eps, ROWS=rows, BLOCK=triton.next_power_of_2(H), num_warps=4)
        return out
    '''
    assert rules(body) == set()


def test_bi001_persistent_row_loops_bounded_by_the_batch_are_fine():
    # Each program walks rows pid, pid + NPROG, ...: T bounds the walk, not any row's reduction.
    body = '''
    @triton.jit
    def _persistent(x_ptr, out_ptr, T, H, NPROG: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x_ptrs = x_ptr + row * H + cols
        while row < T:
            x = tl.load(x_ptrs, mask=cols < H, other=0.0)
            tl.store(out_ptr + row * H + cols, x / tl.sum(x * x, axis=0), mask=cols < H)
            row += NPROG
            x_ptrs += NPROG * H
        for r in range(tl.program_id(0), T, NPROG):
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for off in range(0, H, BLOCK):
                acc += tl.load(x_ptr + r * H + off + cols, mask=off + cols < H, other=0.0)
            tl.store(out_ptr + r, tl.sum(acc, axis=0))

    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _persistent[(min(T, 132),)](x, out, T, H, NPROG=min(T, 132), BLOCK=triton.next_power_of_2(H))
        return out
    '''
    assert rules(body) == set()


def test_bi001_split_of_an_exact_argmax_is_fine():
    # Max and argmax (ties to the lowest index) are exact: splitting the row changes no bits.
    body = '''
    @triton.jit
    def _partial_argmax(x_ptr, val_ptr, idx_ptr, V, CHUNK, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        part = tl.program_id(1)
        best = tl.full([BLOCK], float("-inf"), tl.float32)
        best_idx = tl.zeros([BLOCK], tl.int32)
        for off in range(part * CHUNK, part * CHUNK + CHUNK, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            v = tl.load(x_ptr + row * V + cols, mask=cols < V, other=float("-inf"))
            take = v > best
            best_idx = tl.where(take, off + tl.arange(0, BLOCK), best_idx)
            best = tl.where(take, v, best)
        m = tl.max(best, axis=0)
        i = tl.min(tl.where(best == m, best_idx, 2147483647), axis=0)
        tl.store(val_ptr + row * 64 + part, m)
        tl.store(idx_ptr + row * 64 + part, i)
        tl.store(idx_ptr + row * 64 + 32 + part, tl.argmax(v, axis=0) + part * CHUNK)  # a position

    def rms_norm(x, weight, eps):
        T, V = x.shape
        split = max(1, 128 // T)
        vals = torch.empty(T, 64, device=x.device)
        idx = torch.empty(T, 64, device=x.device, dtype=torch.int32)
        _partial_argmax[(T, split)](x, vals, idx, V, triton.cdiv(V, split), BLOCK=256)
        return vals
    '''
    assert rules(body) == set()


def test_bi001_padded_length_sizes_attention_tile():
    body = '''
    @triton.jit
    def _attn(q_ptr, k_ptr, v_ptr, lens_ptr, out_ptr, L, D: tl.constexpr, BLOCK_N: tl.constexpr):
        b = tl.program_id(0)
        seq_len = tl.load(lens_ptr + b)
        offs_d = tl.arange(0, D)
        q = tl.load(q_ptr + b * D + offs_d)
        m = tl.full((), float("-inf"), tl.float32)
        l = tl.zeros((), tl.float32)
        acc = tl.zeros((D,), tl.float32)
        for start in range(0, seq_len, BLOCK_N):
            offs = start + tl.arange(0, BLOCK_N)
            kv_offs = (b * L + offs[:, None]) * D + offs_d[None, :]
            k = tl.load(k_ptr + kv_offs, mask=offs[:, None] < seq_len, other=0.0)
            s = tl.where(offs < seq_len, tl.sum(k * q[None, :], axis=1), float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=0))
            p = tl.exp(s - m_new)
            alpha = tl.exp(m - m_new)
            v = tl.load(v_ptr + kv_offs, mask=offs[:, None] < seq_len, other=0.0)
            l = l * alpha + tl.sum(p, axis=0)
            acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
            m = m_new
        tl.store(out_ptr + b * D + offs_d, acc / l)

    def decode_attention(q, k_cache, v_cache, seq_lens, scale):
        B, Hq, D = q.shape
        L = k_cache.shape[1]
        out = torch.empty_like(q)
        _attn[(B,)](q, k_cache, v_cache, seq_lens, out, L, D=D, BLOCK_N=BLOCK_N_EXPR)
        return out
    '''
    assert "BI001" in rules(body.replace("BLOCK_N_EXPR", "min(128, triton.next_power_of_2(L))"),
                            "decode_attention")
    assert rules(body.replace("BLOCK_N_EXPR", "64"), "decode_attention") == set()


def test_bi001_same_kernel_different_reduction_block_on_each_path():
    body = CHUNKED + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        if T <= 16:
            _rms[(T,)](x, weight, out, T, H, eps, BLOCK=256)
            return out
        _rms[(T,)](x, weight, out, T, H, eps, BLOCK=1024)
        return out
    '''
    found = run(body).findings
    assert [f.rule for f in found] == ["BI001"]
    assert "`BLOCK`" in found[0].message


# -- BI002: autotune / heuristics on the batch -----------------------------------------------
def _tuned_gemm(configs: str, key: str) -> str:
    return f"    @triton.autotune(configs=[{configs}], key={key})" + GEMM + GEMM_HOST


def test_bi002_autotune_on_batch_with_configs_changing_block_k():
    body = _tuned_gemm('triton.Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4), '
                       'triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128}, num_warps=4)',
                       '["M", "N", "K"]')
    found = run(body, "linear").findings
    assert [f.rule for f in found] == ["BI002"]
    assert "BLOCK_K" in found[0].message and "`M`" in found[0].message


def test_bi002_configs_differing_only_in_parallel_tiling_are_fine():
    body = _tuned_gemm('triton.Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4), '
                       'triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, '
                       'num_stages=4)',
                       '["M", "N", "K"]')
    assert rules(body, "linear") == set()


def test_bi002_configs_built_by_a_comprehension():
    body = ("    _CONFIGS = [triton.Config({'BLOCK_M': m, 'BLOCK_N': 64, 'BLOCK_K': k}) "
            "for m in (16, 64) for k in (32, 64)]\n" + _tuned_gemm("*_CONFIGS", '["M"]'))
    assert rules(body, "linear") == {"BI002"}
    fixed_k = body.replace("for k in (32, 64)", "for k in (64,)")
    assert rules(fixed_k, "linear") == set()


def test_bi002_autotune_not_keyed_on_batch_is_fine():
    body = _tuned_gemm('triton.Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32}), '
                       'triton.Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128})', '["N", "K"]')
    assert rules(body, "linear") == set()


def test_bi002_num_warps_varies_in_a_tl_sum_kernel():
    body = ('    @triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=4), '
            'triton.Config({"BLOCK": 1024}, num_warps=16)], key=["T"])' + CHUNKED + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _rms[(T,)](x, weight, out, T, H, eps)
        return out
    ''')
    assert rules(body) == {"BI002"}


def test_bi002_heuristics_on_batch_setting_the_reduction_block():
    body = ('    @triton.heuristics({"BLOCK": lambda args: 256 if args["T"] < 64 else 2048})' + CHUNKED + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _rms[(T,)](x, weight, out, T, H, eps)
        return out
    ''')
    found = run(body).findings
    assert [f.rule for f in found] == ["BI002"]
    assert "BLOCK" in found[0].message and "`T`" in found[0].message


def test_bi002_heuristics_on_reduced_dim_or_setting_row_tiling_are_fine():
    by_h = ('    @triton.heuristics({"BLOCK": lambda args: min(4096, triton.next_power_of_2(args["H"]))})'
            + CHUNKED + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _rms[(T,)](x, weight, out, T, H, eps)
        return out
    ''')
    assert rules(by_h) == set()
    rows_by_t = ('    @triton.heuristics({"ROWS": lambda args: 1 if args["T"] < 256 else 8})'
                 + ROW_TILES + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        grid = lambda meta: (triton.cdiv(T, meta["ROWS"]),)
        _rms_rows[grid](x, weight, out, T, H, eps, BLOCK=triton.next_power_of_2(H))
        return out
    ''')
    assert rules(rows_by_t) == set()


def test_bi002_heuristics_on_batch_selecting_a_code_path_in_the_kernel():
    body = '''
    @triton.heuristics({"ROWS": lambda args: 4 if args["T"] >= 1024 else 1})
    @triton.jit
    def _scale(x_ptr, out_ptr, T, H, ROWS: tl.constexpr, BLOCK: tl.constexpr):
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK)
        mask = (rows[:, None] < T) & (cols[None, :] < H)
        x = tl.load(x_ptr + rows[:, None] * H + cols[None, :], mask=mask, other=0.0)
        if ROWS > 1:
            y = x * (1.0 / 3.0)
        else:
            y = x / 3.0
        tl.store(out_ptr + rows[:, None] * H + cols[None, :], y, mask=mask)

    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _scale[lambda m: (triton.cdiv(T, m["ROWS"]),)](x, out, T, H, BLOCK=triton.next_power_of_2(H))
        return out
    '''
    assert rules(body) == {"BI002"}


def test_masking_only_kernel_branch_on_batch_is_fine():
    body = '''
    @triton.jit
    def _copy(x_ptr, out_ptr, T, H, EVEN: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        if EVEN:
            x = tl.load(x_ptr + row * H + cols)
        else:
            x = tl.load(x_ptr + row * H + cols, mask=row < T, other=0.0)
        tl.store(out_ptr + row * H + cols, x * 2.0)

    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _copy[(T,)](x, out, T, H, EVEN=T % 16 == 0, BLOCK=triton.next_power_of_2(H))
        return out
    '''
    assert rules(body) == set()


# -- BI003: atomics ---------------------------------------------------------------------------
ATOMIC = '''
@triton.jit
def _sumsq(x_ptr, acc_ptr, cnt_ptr, H, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0)
    part = tl.sum(x * x, axis=0)
    if SPLIT > 1:
        tl.atomic_add(acc_ptr + row, part)
    else:
        tl.store(acc_ptr + row, part)
    tl.atomic_add(cnt_ptr + row, 1)

def rms_norm(x, weight, eps):
    T, H = x.shape
    acc = torch.zeros(T, device=x.device, dtype=torch.float32)
    cnt = torch.zeros(T, device=x.device, dtype=torch.int32)
    split = SPLIT_VALUE
    _sumsq[(T, split)](x, acc, cnt, H, SPLIT=split, BLOCK=triton.cdiv(H, split))
    return x * torch.rsqrt(acc[:, None] / H + eps) * weight
'''


def test_bi003_atomic_add_of_partial_sums():
    body = ATOMIC.replace("SPLIT_VALUE", "4")
    atomics = [f for f in run(body).findings if f.rule == "BI003"]
    assert len(atomics) == 1 and "atomic_add" in atomics[0].message
    assert atomics[0].line == line_of(body, "tl.atomic_add(acc_ptr")  # not the integer counter


def test_bi003_atomic_under_a_constexpr_guard_that_the_launch_rules_out_is_fine():
    assert "BI003" not in rules(ATOMIC.replace("SPLIT_VALUE", "1"))


def test_bi003_order_free_atomic_max_per_row_is_fine():
    body = '''
    @triton.jit
    def _amax(x_ptr, amax_ptr, H, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0)
        tl.atomic_max(amax_ptr + row, tl.max(tl.abs(x), axis=0))

    def rms_norm(x, weight, eps):
        T, H = x.shape
        amax = torch.zeros(T, device=x.device, dtype=torch.float32)
        _amax[(T, triton.cdiv(H, 256))](x, amax, H, BLOCK=256)
        return x / amax[:, None]
    '''
    assert rules(body) == set()


# -- BI004: dispatch --------------------------------------------------------------------------
def test_bi004_small_batch_falls_back_to_torch():
    body = rms_host("1024").replace("        BLOCK = 1024\n", '''        if T <= 8:
            return (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)
        BLOCK = 1024
''')
    found = {f.rule: f for f in run(body).findings}
    assert set(found) == {"BI004", "BI005"}
    assert "T <= 8" in found["BI004"].message


def test_bi004_dispatch_through_a_predicate_helper():
    body = rms_host("1024").replace("        BLOCK = 1024\n", '''        if not _is_prefill(x):
            return x * weight
        BLOCK = 1024
''') + "\n    def _is_prefill(x):\n        return x.shape[0] >= 256\n"
    assert rules(body) == {"BI004"}


def test_bi004_two_kernels_chosen_by_ternary_callee():
    body = CHUNKED + ROW_TILES + '''
    def _chunked(x, weight, eps):
        out = torch.empty_like(x)
        _rms[(x.shape[0],)](x, weight, out, x.shape[0], x.shape[1], eps, BLOCK=1024)
        return out

    def _whole(x, weight, eps):
        out = torch.empty_like(x)
        H = x.shape[1]
        _rms_rows[(x.shape[0],)](x, weight, out, x.shape[0], H, eps, ROWS=1, BLOCK=triton.next_power_of_2(H))
        return out

    _IMPLS = {True: _chunked, False: _whole}

    def rms_norm(x, weight, eps):
        impl = _IMPLS[x.shape[0] > 512]
        return impl(x, weight, eps)
    '''
    assert rules(body) == {"BI004"}


def test_bi004_kernel_branch_on_runtime_batch_argument():
    body = '''
    @triton.jit
    def _scale(x_ptr, out_ptr, T, H, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0)
        if T > 64:
            y = x * (1.0 / 3.0)
        else:
            y = x / 3.0
        tl.store(out_ptr + row * H + cols, y, mask=cols < H)

    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _scale[(T,)](x, out, T, H, BLOCK=triton.next_power_of_2(H))
        return out
    '''
    assert rules(body) == {"BI004"}


def test_branches_that_are_not_batch_dispatch():
    empty = rms_host("1024").replace("        BLOCK = 1024\n",
                                     "        if T == 0:\n            return out\n        BLOCK = 1024\n")
    too_big = rms_host("1024").replace(
        "        BLOCK = 1024\n",
        "        if T > 65536:\n            raise ValueError('too many rows')\n        BLOCK = 1024\n")
    by_width = CHUNKED + ROW_TILES + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        if H > 8192:
            _rms[(T,)](x, weight, out, T, H, eps, BLOCK=1024)
        else:
            _rms_rows[(T,)](x, weight, out, T, H, eps, ROWS=1, BLOCK=triton.next_power_of_2(H))
        return out
    '''
    grid_only = CHUNKED + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        if T > 4096:
            _rms[(T,)](x, weight, out, T, H, eps, BLOCK=1024, num_stages=3)
        else:
            _rms[(T,)](x, weight, out, T, H, eps, BLOCK=1024, num_stages=1)
        return out
    '''
    for body in (empty, too_big, by_width, grid_only):
        assert rules(body) == set(), body


# -- BI005: vendor ops ------------------------------------------------------------------------
@pytest.mark.parametrize("expr", [
    "torch.matmul(x, weight.t())", "x @ weight.t()", "F.linear(x, weight, bias)",
    "torch.mm(x, weight.T)", "torch.addmm(bias, x, weight.t())", "x.matmul(weight.t())",
    "torch.einsum('tk,nk->tn', x, weight)",
])
def test_bi005_vendor_gemm_on_batched_input(expr):
    body = f"def linear(x, weight, bias):\n    y = {expr}\n    return y\n"
    found = run(body, "linear").findings
    assert [f.rule for f in found] == ["BI005"]
    assert "`x`" in found[0].message


def test_bi005_torch_function_held_in_a_variable():
    body = ("_MM = torch.mm\n\ndef linear(x, weight, bias):\n"
            "    mm = _MM if bias is None else torch.matmul\n    return mm(x, weight.t())\n")
    assert rules(body, "linear") == {"BI005"}


@pytest.mark.parametrize("expr", [
    "x.float().pow(2).mean(-1, keepdim=True)", "torch.sum(x * x, dim=-1, keepdim=True)",
    "torch.linalg.vector_norm(x, dim=-1, keepdim=True)", "F.softmax(x, dim=-1)",
    "torch.logsumexp(x, -1, keepdim=True)", "x.var(-1, keepdim=True)",
])
def test_bi005_vendor_reduction_over_rows_of_batched_input(expr):
    body = f"def rms_norm(x, weight, eps):\n    s = {expr}\n    return x * s * weight\n"
    assert rules(body) == {"BI005"}


@pytest.mark.parametrize("expr", [
    "torch.sigmoid(x) * x * weight",               # elementwise
    "x * weight.float().pow(2).mean()",            # reduction over the unbatched weight
    "x / x.abs().amax(dim=-1, keepdim=True)",      # exact per-row max
    "torch.argmax(x, dim=-1)", "torch.topk(x, 2, dim=-1).values",
])
def test_bi005_elementwise_exact_and_unbatched_ops_are_fine(expr):
    body = f"def rms_norm(x, weight, eps):\n    return {expr}\n"
    assert rules(body) == set()


# -- BI006: cross-row dependence --------------------------------------------------------------
def test_bi006_batch_global_scale_into_kernel():
    body = CHUNKED + '''
    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        s = x.abs().max().item() / 127.0
        _rms[(T,)](x, weight, out, T, H, s, BLOCK=1024)
        return out
    '''
    found = run(body).findings
    assert [f.rule for f in found] == ["BI006"]
    assert "x.abs().max()" in found[0].message


def test_bi006_reduction_over_batch_axis_returned():
    assert rules("def rms_norm(x, weight, eps):\n    return (x - x.mean(0)) * weight\n") == {"BI006"}
    assert rules("def rms_norm(x, weight, eps):\n    return x * torch.amax(x, dim=0) * weight\n") == {"BI006"}


def test_bi006_atomic_max_into_one_shared_location():
    body = '''
    @triton.jit
    def _amax(x_ptr, amax_ptr, H, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0)
        tl.atomic_max(amax_ptr, tl.max(tl.abs(x), axis=0))

    def rms_norm(x, weight, eps):
        T, H = x.shape
        amax = torch.zeros(1, device=x.device, dtype=torch.float32)
        _amax[(T,)](x, amax, H, BLOCK=triton.next_power_of_2(H))
        return x / amax
    '''
    assert rules(body) == {"BI006"}


def test_bi006_batch_wide_max_length_for_the_grid_only_is_fine():
    body = '''
    @triton.jit
    def _attn(q_ptr, lens_ptr, out_ptr, D: tl.constexpr):
        b = tl.program_id(0)
        offs = tl.arange(0, D)
        tl.store(out_ptr + b * D + offs, tl.load(q_ptr + b * D + offs))

    def decode_attention(q, k_cache, v_cache, seq_lens, scale):
        B, Hq, D = q.shape
        max_len = int(seq_lens.max())
        out = torch.empty_like(q)
        _attn[(B, triton.cdiv(max_len, 256))](q, seq_lens, out, D=D)
        return out
    '''
    assert rules(body, "decode_attention") == set()


# -- BI007: batch-derived value in a row's arithmetic -----------------------------------------
SCALE = '''
    @triton.jit
    def _scale(x_ptr, out_ptr, T, H, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * H + cols, mask=(cols < H) & (row < T), other=0.0)
        y = EXPR
        tl.store(out_ptr + row * H + cols, y, mask=cols < H)

    def rms_norm(x, weight, eps):
        T, H = x.shape
        out = torch.empty_like(x)
        _scale[(T,)](x, out, T, H, SHIFT=SHIFT_VALUE, BLOCK=triton.next_power_of_2(H))
        return out
    '''


@pytest.mark.parametrize("expr,shift", [
    ("x * (1.0 / T)", "4"),
    ("((x.to(tl.int32, bitcast=True) >> SHIFT) << SHIFT).to(tl.float32, bitcast=True)", "max(1, 6 - T // 8)"),
    ("tl.maximum(x, SHIFT * 1.0)", "T"),
])
def test_bi007_batch_derived_value_enters_row_arithmetic(expr, shift):
    found = run(SCALE.replace("EXPR", expr).replace("SHIFT_VALUE", shift)).findings
    assert [f.rule for f in found] == ["BI007"]
    assert "enters the arithmetic" in found[0].message


@pytest.mark.parametrize("expr", [
    "x * (1.0 / H)",                                   # a non-batch dimension
    "x * (row < T).to(tl.float32)",                    # a mask selects, it does not compute
    "tl.where(row < T, x * 2.0, 0.0)",
])
def test_bi007_masks_indices_and_non_batch_parameters_are_fine(expr):
    assert rules(SCALE.replace("EXPR", expr).replace("SHIFT_VALUE", "4")) == set()


def test_bi007_host_arithmetic_with_the_batch_size():
    assert rules("def rms_norm(x, weight, eps):\n    return x * weight / x.shape[0]\n") == {"BI007"}
    assert rules("def rms_norm(x, weight, eps):\n    return x * weight / x.shape[1]\n") == set()
