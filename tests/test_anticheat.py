"""Anti-cheat checks on real kernel files that cheat, each in one recognisable way; each runs
in a caged runner, as in an evaluation."""

from pathlib import Path

import pytest

from gates.anticheat import anticheat_findings
from gates.candidate import CandidateError
from gates.contract import get_task
from gates.judge.client import CandidateFailure, Runner
from gates.judge.runner_pool import reference_dirs

FIXTURES = Path(__file__).parent / "fixtures" / "rms_norm"
RMS = get_task("rms_norm")


def findings(name):
    runner = Runner("cpu", reference_dirs=reference_dirs(RMS))
    try:
        try:
            changes = runner.load((FIXTURES / f"{name}.py").read_text(), RMS.entry)
        except CandidateError:
            return runner.take_findings()
        try:
            return anticheat_findings(runner, changes, RMS, "cpu") + runner.take_findings()
        except CandidateFailure:  # the candidate raised: what the runner saw is the finding
            return runner.take_findings()
    finally:
        runner.stop()


def test_honest_kernel_has_no_findings():
    assert findings("rows") == []


@pytest.mark.parametrize("name,rule,text", [
    ("mutates_input", "AC001", "wrote to its input x"),
    ("aliases_input", "AC004", "output out shares memory with input x"),
    ("caches_by_shape", "AC002", "cached by shape"),
    ("reuses_output", "AC002", "overwrote the result of its previous call"),
    ("calls_reference", "AC003", "tried to read the task's reference files"),
    ("sets_tf32", "AC006", "torch.backends.cuda.matmul.allow_tf32: False -> True"),
])
def test_cheat_is_rejected(name, rule, text):
    found = findings(name)
    errors = [f for f in found if f.severity == "error"]
    assert any(f.rule == rule and text in f.message for f in errors), found
    assert all(f.hint for f in found)


def test_no_kernel_is_only_a_warning():
    found = findings("torch_only")
    assert [(f.rule, f.severity) for f in found] == [("AC005", "warning")]


RENAMED_COPY = '''
import torch

def _norm(a, b, e):
    """Not the reference, says the docstring."""
    af = a.float()
    scale = torch.rsqrt(af.pow(2).mean(dim=-1, keepdim=True) + e)
    return (af * scale * b.float()).to(a.dtype)

def rms_norm(x, weight, eps):
    return _norm(x, weight, eps)
'''


def test_a_renamed_copy_of_the_reference_is_found_in_the_source():
    from gates.anticheat import reference_copy_findings

    [error] = reference_copy_findings(RENAMED_COPY, RMS, launched=False)
    assert (error.rule, error.severity) == ("AC003", "error") and "_norm() at line 4" in error.message
    [warning] = reference_copy_findings(RENAMED_COPY, RMS, launched=True)
    assert warning.severity == "warning" and "fallback" in warning.message
    assert reference_copy_findings((FIXTURES / "rows.py").read_text(), RMS, launched=True) == []
    # A copy the entry never reaches is not the entry's work.
    unreached = RENAMED_COPY.replace("return _norm(x, weight, eps)", "return x * weight")
    assert reference_copy_findings(unreached, RMS, launched=False) == []
