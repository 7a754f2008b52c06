"""The static gate's contract: what it returns for good, bad and strange candidate files."""

import textwrap

from gates.contract import get_task
from gates.static import static_gate

TASK = get_task("rms_norm")


def test_syntax_error_is_a_failed_result_not_an_exception():
    result = static_gate("def rms_norm(x, weight, eps):\n    return (x\n", TASK, "bad.py")
    assert result.gate == "static" and not result.passed
    (finding,) = result.findings
    assert finding.rule == "BI000" and finding.line is not None
    assert result.error and result.error.startswith("bad.py line") and "\n" not in result.error


def test_missing_entry_function_is_reported():
    result = static_gate("def rmsnorm(x, weight, eps):\n    return x\n", TASK)
    assert not result.passed and result.findings[0].rule == "BI000"
    assert "'rms_norm'" in result.error


def test_entry_the_gate_cannot_follow_gives_a_warning_and_kernel_checks_only():
    source = textwrap.dedent('''
    import functools
    import triton
    import triton.language as tl

    @triton.jit
    def _k(x_ptr, acc_ptr):
        tl.atomic_add(acc_ptr, tl.load(x_ptr + tl.program_id(0)))

    def _impl(x, weight, eps, block):
        return x

    rms_norm = functools.partial(_impl, block=128)
    ''')
    result = static_gate(source, TASK)
    assert [(f.rule, f.severity) for f in result.findings] == [("BI000", "warning"), ("BI003", "error")]
    assert result.error is None and not result.passed


def test_clean_candidate_passes_with_time_measured():
    source = (TASK.candidates_dir / "row_per_program.py").read_text()
    result = static_gate(source, TASK)
    assert result.passed and result.findings == [] and result.error is None
    assert 0 < result.seconds < 5


def test_findings_are_sorted_by_line_and_carry_hints():
    source = textwrap.dedent('''
    import torch

    def rms_norm(x, weight, eps):
        if x.shape[0] > 64:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
        y = x @ weight.diag()
        return (x - x.mean(0)) * y
    ''')
    result = static_gate(source, TASK)
    assert not result.passed
    lines = [f.line for f in result.findings]
    assert lines == sorted(lines) and len(lines) >= 3
    assert {f.rule for f in result.findings} >= {"BI004", "BI005", "BI006"}
    assert all(f.hint for f in result.findings)
    assert {f.severity for f in result.findings if f.rule == "BI005"} == {"warning"}


def test_odd_but_valid_python_does_not_crash_the_gate():
    source = textwrap.dedent('''
    import functools
    import torch

    def _loop(n):
        return _loop(n - 1) if n else 0

    @functools.lru_cache(None)
    def _cfg(*shape, **extra):
        return {"shape": shape, **extra}

    class Box:
        class Inner:
            value = 3
        items = [lambda v=1: v]

    def rms_norm(x, weight, eps, *rest, **kw):
        global _G
        a, *b = x.shape
        c = [v for v in range(x.shape[0]) if v % 2]
        d = {k: v for k, v in zip("ab", x.shape)}
        e = _cfg(*x.shape, mode="x")["shape"]
        f = (lambda t: t + 1)(_loop(3))
        with torch.no_grad():
            try:
                y = x.clone()
            except RuntimeError:
                y = x
            finally:
                pass
        del a
        async def never():
            await never()
        return y * weight
    ''')
    result = static_gate(source, TASK)
    assert result.error is None
