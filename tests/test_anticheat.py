"""Anti-cheat checks on real kernel files that cheat, each in one recognisable way."""

from pathlib import Path

import pytest

from gates.anticheat import anticheat_findings
from gates.candidate import candidate_entry
from gates.contract import get_task

FIXTURES = Path(__file__).parent / "fixtures" / "rms_norm"
RMS = get_task("rms_norm")


def findings(name):
    loaded, fn = candidate_entry(FIXTURES / f"{name}.py", RMS.entry)
    return anticheat_findings(fn, loaded, RMS, "cpu")


def test_honest_kernel_has_no_findings():
    assert findings("rows") == []


@pytest.mark.parametrize("name,rule,text", [
    ("mutates_input", "AC001", "wrote to its input x"),
    ("aliases_input", "AC004", "output out shares memory with input x"),
    ("caches_by_shape", "AC002", "cached by shape"),
    ("reuses_output", "AC002", "overwrote the result of its previous call"),
    ("calls_reference", "AC003", "runs the task's reference (rms_norm in reference.py)"),
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


def test_global_state_is_restored_after_loading():
    import torch

    findings("sets_tf32")
    assert torch.backends.cuda.matmul.allow_tf32 is False
