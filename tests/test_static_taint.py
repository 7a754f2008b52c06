"""Batch taint through host code: every way a candidate can read the batch size, every way the
value can travel, and the values that must stay clean."""

import ast
import textwrap

import pytest

from gates.contract import get_task
from gates.static import analyse, static_gate
from gates.static.values import flat_batch

HEADER = "import math\nimport torch\nimport triton\nimport triton.language as tl\n"

KERNEL = '''
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
        tl.store(out_ptr + row * H + cols, x * rstd, mask=cols < H)
'''


def candidate(prelude: str, host: str) -> str:
    """A candidate whose entry computes BLOCK with `host` (may use n, h) and launches _rms."""
    entry = f'''
def rms_norm(x, weight, eps):
{textwrap.indent(textwrap.dedent(host), "    ")}
    out = torch.empty_like(x)
    _rms[(x.shape[0],)](x, weight, out, x.shape[0], x.shape[1], eps, BLOCK=BLOCK)
    return out
'''
    return HEADER + textwrap.dedent(prelude) + KERNEL + entry


def launch_block(src: str):
    analysis = analyse(ast.parse(src), get_task("rms_norm"))
    (launch,) = [la for la in analysis.host.launches if la.kernel == "_rms"]
    return launch.params["BLOCK"]


BATCH_SOURCES = [
    "n = x.shape[0]", "n = x.size(0)", "n = len(x)", "n = x.numel() // x.shape[-1]", "n, h = x.shape",
    "n = x.size()[0]", "rows = x.view(-1, x.shape[-1])\nn = rows.shape[0]",
    "rows = x.reshape(-1, x.size(-1)).contiguous()\nn = rows.size(0)", "n = x[: x.shape[0] // 2].shape[0]",
    "xf = x.float()\nn = xf.shape[0]", "n = x.t().shape[1]", "n = x.flatten().numel()",
    # The rows cancel only in a plain element count divided by row counts.
    "n = (x.numel() + 7) // x.shape[0]", "n = x.numel() // 4",
]


@pytest.mark.parametrize("source", BATCH_SOURCES)
def test_batch_size_sources(source):
    src = candidate("", source + "\nBLOCK = 256 if n < 64 else 1024")
    assert flat_batch(launch_block(src)) is not None, source


CLEAN_SOURCES = [
    "n = x.shape[1]", "n = x.size(-1)", "_, n = x.shape", "n = weight.shape[0]", "n = x.stride(0)",
    "n = weight.numel()", "n = x.view(x.shape[0], -1).shape[1]", "n = x.dim()", "n = len(weight)",
    # Elements per row: FlagGems' `K = x.numel() // M // N` (M the leading extents) for a last-axis op.
    "n = x.numel() // x.shape[0]", "m = 1\nfor i in range(x.dim() - 1):\n    m *= x.shape[i]\n"
    "n = x.numel() // m // x.shape[-1]",
]


@pytest.mark.parametrize("source", CLEAN_SOURCES)
def test_non_batch_dimensions_stay_clean(source):
    src = candidate("", source + "\nBLOCK = 256 if n < 64 else 1024")
    assert flat_batch(launch_block(src)) is None, source


DERIVATIONS = [
    ("", "t = x.shape[0]\nBLOCK = t * 4"),
    ("", "t = x.shape[0]\nBLOCK = min(4096, max(64, t))"),
    ("", "t = x.shape[0]\nBLOCK = triton.next_power_of_2(triton.cdiv(4096, t))"),
    ("", "t = x.shape[0]\nBLOCK = int(math.ceil(4096 / t))"),
    ("", "t = x.shape[0]\nBLOCK = 512\nif t > 64:\n    BLOCK = 1024"),
    ("", "t = x.shape[0]\nBLOCK = 64\nwhile BLOCK * t < 8192:\n    BLOCK *= 2"),
    ("", "t = x.shape[0]\nsizes = (256, 1024)\nBLOCK = sizes[t > 8]"),
    ("_TABLE = {1: 256, 2: 512}\n", "BLOCK = _TABLE.get(x.shape[0], 1024)"),
    ("def _pick(rows):\n    return 256 if rows < 64 else 1024\n", "BLOCK = _pick(x.shape[0])"),
    ("def _pick(t, h):\n    if t < 64:\n        return 256\n    return 1024\n", "BLOCK = _pick(len(x), 7)"),
    ("def _rows(x):\n    return x.shape[0]\n", "BLOCK = 32 * _rows(x)"),
    ("class Plan:\n    def __init__(self, rows):\n        self.block = 256 if rows < 8 else 1024\n",
     "BLOCK = Plan(x.shape[0]).block"),
    ("import dataclasses\n@dataclasses.dataclass\nclass Plan:\n    block: int\n\n"
     "def _plan(t):\n    return Plan(block=512 if t < 8 else 2048)\n", "BLOCK = _plan(x.shape[0]).block"),
    ("class Tuner:\n    small = 256\n    def pick(self, t):\n        return self.small if t < 8 else 1024\n",
     "BLOCK = Tuner().pick(x.shape[0])"),
    ("", "t = x.shape[0]\ndef pick():\n    return 128 if t < 8 else 1024\nBLOCK = pick()"),
    ("", "t = x.shape[0]\nBLOCK = [256, 512, 1024][min(t // 64, 2)]"),
    ("", "t = x.shape[0]\ncfg = {'block': 256 if t < 8 else 1024}\nBLOCK = cfg['block']"),
    # Two sizes unknown to the gate are still two sizes (a library's `block // 8 if M < 16 else block`).
    ("", "t = x.shape[0]\nfull = triton.next_power_of_2(x.shape[1])\nBLOCK = full // 8 if t < 16 else full"),
]


@pytest.mark.parametrize("prelude,host", DERIVATIONS)
def test_batch_taint_follows_derivations(prelude, host):
    src = candidate(prelude, host)
    result = static_gate(src, get_task("rms_norm"))
    assert [f.rule for f in result.findings] == ["BI001"], (host, result.findings)


CLEAN_DERIVATIONS = [
    ("", "_, h = x.shape\nBLOCK = min(4096, triton.next_power_of_2(h))"),
    ("", "BLOCK = 1024\nif x.shape[0] == 0:\n    BLOCK = 1024"),
    ("", "t = x.shape[0]\nBLOCK = 1024 if t < 8 else 1024"),
    ("", "t = x.shape[0]\nfull = triton.next_power_of_2(x.shape[1])\nBLOCK = full if t < 8 else full"),
    ("def _pick(h):\n    return 256 if h < 1024 else 1024\n", "BLOCK = _pick(x.shape[1])"),
    ("_BLOCK = 512\n", "BLOCK = _BLOCK"),
    ("", "BLOCK = 1024 if x.is_cuda else 256"),
    ("", "BLOCK = 1024\nfor _ in range(x.shape[0]):\n    pass"),
]


@pytest.mark.parametrize("prelude,host", CLEAN_DERIVATIONS)
def test_clean_values_stay_clean(prelude, host):
    src = candidate(prelude, host)
    assert static_gate(src, get_task("rms_norm")).findings == [], host


def test_padded_length_of_decode_attention_is_batch_derived():
    src = HEADER + textwrap.dedent('''
    def decode_attention(q, k_cache, v_cache, seq_lens, scale):
        return q
    ''')
    task = get_task("decode_attention")
    tree = ast.parse(src)
    analysis = analyse(tree, task)
    assert analysis.host.entry_found
    from gates.static.taint import HostReader
    reader = HostReader(tree, task, analysis.kernels)
    names = [a.name for a in task.args]
    values = {n: reader.contract_value(spec, n, 1) for n, spec in zip(names, task.args, strict=True)}
    padded = names.index("k_cache")
    assert flat_batch(values["k_cache"].dims[0]) and flat_batch(values["k_cache"].dims[1])
    assert "padded length" in flat_batch(values["k_cache"].dims[1]).text
    assert flat_batch(values["k_cache"].dims[3]) is None and padded == 1


def test_entry_parameters_are_matched_by_position():
    # The candidate may name its parameters differently from the reference.
    src = HEADER + KERNEL + textwrap.dedent('''
    def rms_norm(inp, w, epsilon):
        out = torch.empty_like(inp)
        _rms[(inp.shape[0],)](inp, w, out, inp.shape[0], inp.shape[1], epsilon, BLOCK=inp.shape[0])
        return out
    ''')
    assert [f.rule for f in static_gate(src, get_task("rms_norm")).findings] == ["BI001"]


def test_kernel_alias_made_by_calling_autotune_and_entry_as_callable_object():
    src = HEADER + KERNEL + textwrap.dedent('''
    _tuned = triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 2048})],
                             key=["T"])(_rms)

    class RMSNorm:
        def __call__(self, x, weight, eps):
            out = torch.empty_like(x)
            _tuned[(x.shape[0],)](x, weight, out, x.shape[0], x.shape[1], eps)
            return out

    rms_norm = RMSNorm()
    ''')
    assert [f.rule for f in static_gate(src, get_task("rms_norm")).findings] == ["BI002"]
