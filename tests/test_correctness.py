"""The correctness gate on real kernel files: passes a correct kernel, and names the output,
case and element of each kind of failure."""

from pathlib import Path

import pytest
import torch

from gates import correctness
from gates.candidate import candidate_entry
from gates.contract import Tolerance, get_task
from gates.correctness import compare_output, correctness_gate, correctness_job

FIXTURES = Path(__file__).parent / "fixtures" / "rms_norm"
RMS = get_task("rms_norm")
TOL = Tolerance(atol=1e-3, rtol=1e-3)


def gate(name):
    return correctness_gate(candidate_entry(FIXTURES / f"{name}.py", RMS.entry)[1], RMS, "cpu")


def test_correct_kernel_passes_every_shape_dtype_and_seed():
    result = gate("rows")
    assert result.passed and not result.findings and result.error is None


@pytest.mark.parametrize("name,rule,text", [
    ("forgets_weight", "CR005", "bfloat16 T=1 H=256 seed 0: output out: "),
    ("returns_float32", "CR003", "T=1 H=256 seed 0: output out has dtype float32, expected bfloat16"),
    ("drops_last_row", "CR002", "T=3 H=256 seed 0: output out has shape (2, 256), expected (3, 256)"),
    ("nan_first_row", "CR004", "output out: NaN where the reference has a number at [0, 0]"),
])
def test_failures_are_reported_precisely(name, rule, text):
    result = gate(name)
    assert not result.passed
    first = result.findings[0]
    assert first.rule == rule and text in first.message and first.hint
    assert "\n" not in first.message


def test_value_failure_names_worst_element_and_tolerance():
    message = gate("forgets_weight").findings[0].message
    assert "elements differ beyond atol=0.02 rtol=0.02; worst at [0, " in message
    assert "got " in message and "expected " in message


def test_candidate_exception_is_an_error_naming_the_case():
    result = gate("compile_error")
    assert not result.passed and "compile_error.py line" in result.error
    assert "T=1 H=256 seed 0" in result.error


def test_job_merges_anticheat_findings():
    result = correctness_job((FIXTURES / "mutates_input.py").read_text(), RMS, "cpu")
    assert not result.passed and [f.rule for f in result.findings][:1] == ["AC001"]
    assert correctness_job((FIXTURES / "torch_only.py").read_text(), RMS, "cpu").passed  # a warning only


def test_compare_output_special_values():
    want = torch.tensor([1.0, float("inf"), float("nan"), 2.0])
    assert compare_output("o", want.clone(), want, TOL) is None
    rule, msg = compare_output("o", torch.tensor([1.0, -float("inf"), float("nan"), 2.0]), want, TOL)
    assert rule == "CR004" and "infinity mismatch at [1]" in msg
    rule, msg = compare_output("o", torch.tensor([1.0, float("inf"), 0.5, 2.0]), want, TOL)
    assert rule == "CR004" and "a number where the reference has NaN at [2]" in msg
    rule, msg = compare_output("o", torch.tensor([1.0, float("inf"), float("nan"), 2.01]), want, TOL)
    assert rule == "CR005" and "1 of 4 elements" in msg and "worst at [3]" in msg
    assert compare_output("o", [1.0], want, TOL)[0] == "CR001"


def test_integers_compare_exactly_except_int8_by_one():
    ids = torch.tensor([[3, 4], [5, 6]])
    rule, msg = compare_output("ids", ids + torch.tensor([[0, 0], [0, 1]]), ids, TOL)
    assert rule == "CR005" and "first at [1, 1]: got 7, expected 6" in msg
    q = torch.tensor([10, -127], dtype=torch.int8)
    assert compare_output("q", q + 1, q, TOL) is None
    assert compare_output("q", q + 2, q, TOL)[0] == "CR005"


# TF32: whether float32 products may round to TF32 is the task's choice (fp32_matmul) -------------
LINEAR = get_task("linear")


def _tf32(t):
    """float32 values rounded to TF32's 10-bit mantissa (what tensor cores multiply)."""
    return (t.view(torch.int32) & ~0x1FFF).view(torch.float32) if t.dtype == torch.float32 else t


def tf32_linear(x, weight, bias):
    out = torch.nn.functional.linear(_tf32(x.float()), _tf32(weight.float()), bias.float())
    return out.to(x.dtype)


def test_tf32_products_are_named_with_the_fix_when_the_task_wants_ieee():
    assert LINEAR.fp32_matmul == "ieee"
    result = correctness_gate(tf32_linear, LINEAR, "cpu")
    assert not result.passed
    first = result.findings[0]
    assert first.rule == "CR005" and first.message.startswith("float32 ")
    assert "the size TF32 products give" in first.message
    assert 'input_precision="ieee"' in first.hint and '"tf32x3"' in first.hint
    assert all(f.message.startswith("float32") for f in result.findings if "cases failed" not in f.message)


def test_a_task_that_allows_tf32_accepts_tf32_products():
    assert correctness_gate(tf32_linear, LINEAR.model_copy(update={"fp32_matmul": "tf32"}), "cpu").passed


def test_a_wrong_formula_is_not_blamed_on_tf32():
    def no_bias(x, weight, bias):
        return torch.nn.functional.linear(x.float(), weight.float()).to(x.dtype)

    first = correctness_gate(no_bias, LINEAR, "cpu").findings[0]
    assert "TF32" not in first.message and first.hint != correctness.TF32_HINT


@pytest.mark.parametrize("choice,text", [("ieee", 'float32 products must be IEEE float32, not TF32'),
                                         ("tf32", "float32 products may use TF32")])
def test_the_prompt_states_the_tasks_tf32_choice(choice, text):
    from agentloop.loop.prompts import Prompts, task_brief

    task = LINEAR.model_copy(update={"fp32_matmul": choice})
    brief = task_brief(task, "cuda")
    messages = Prompts().messages("coder", "baseline", plan=None, best=None, attempts=None, **brief)
    assert text in messages[-1].content
