"""`agentloop audit` as docs/reference/cli.md describes it: gates, --json shape, exit codes 0/1/2 and
one-line messages for unusable input; and the audit() API with a reused sandbox."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentloop.cli import app
from gates.audit import audit
from gates.contract import get_task
from gates.judge.sandbox import Sandbox

FIXTURES = Path(__file__).parent / "fixtures" / "rms_norm"
GATE_KEYS = {"gate", "passed", "seconds", "findings"}
COUNTEREXAMPLE_KEYS = {"output", "row", "batch_size", "position", "reference_batch_size", "max_abs_diff",
                       "mismatched_elements"}
FINDING_KEYS = {"rule", "severity", "line", "message", "hint"}


def run(*args):
    return CliRunner().invoke(app, ["audit", *map(str, args)])


def test_accepted_candidate_json_shape_and_exit_0():
    result = run(FIXTURES / "rows.py", "--task", "rms_norm", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == {"task", "candidate", "verdict", "seconds", "device", "coverage", "note", "gates",
                         "isolation"}
    # Where it was measured and over what: not a GPU verdict.
    assert data["device"] == "cpu" and data["note"] == "cpu interpreter: not a GPU verdict"
    assert re.fullmatch(r"batch 1-512 \(14 sizes\) \+ \d+ beyond \(sweep seed \d+\), float32",
                        data["coverage"]["dynamic"]), data["coverage"]
    assert data["coverage"]["correctness"].endswith("2 seeds")
    assert data["task"] == "rms_norm" and data["candidate"] == str(FIXTURES / "rows.py")
    # Which layers of the cage were active (the kernel may refuse namespaces: then the audit
    # hook's blocks), as the runner said before the candidate loaded.
    iso = data["isolation"]
    assert iso["network"] in ("namespace", "audit-hook") and iso["files"] in ("namespace", "audit-hook")
    assert iso["arena"] == "host" and iso["limits"]["RLIMIT_NPROC"] == 512
    assert data["verdict"] == "accept" and isinstance(data["seconds"], float)
    assert [g["gate"] for g in data["gates"]] == ["static", "dynamic", "correctness"]
    for g in data["gates"]:
        assert GATE_KEYS <= set(g) <= GATE_KEYS | {"counterexample", "error", "coverage"}
        assert g["passed"] is True and isinstance(g["seconds"], float)
        for f in g["findings"]:
            assert set(f) == FINDING_KEYS and f["severity"] in ("error", "warning")


def test_variant_candidate_exit_1_with_counterexample():
    result = run(FIXTURES / "split_by_batch.py", "--task", "rms_norm", "--device", "cpu", "--gate", "dynamic",
                 "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert data["verdict"] == "reject" and [g["gate"] for g in data["gates"]] == ["dynamic"]
    cx = data["gates"][0]["counterexample"]
    assert COUNTEREXAMPLE_KEYS <= set(cx)
    assert cx["batch_size"] == 16 and cx["reference_batch_size"] == 1 and cx["mismatched_elements"] > 0


def test_repeated_gate_option_and_human_output():
    result = run(FIXTURES / "forgets_weight.py", "--task", "rms_norm", "--device", "cpu",
                 "--gate", "correctness", "--gate", "static")
    assert result.exit_code == 1
    assert "static" in result.output and "correctness" in result.output and "dynamic" not in result.output
    assert "[CR005]" in result.output and "reject" in result.output
    assert "caged: network " in result.output and "arena host" in result.output


def test_hang_is_rejected_as_timed_out():
    result = run(FIXTURES / "hang.py", "--task", "rms_norm", "--device", "cpu", "--gate", "dynamic",
                 "--timeout", "3", "--json")
    assert result.exit_code == 1
    gate = json.loads(result.output)["gates"][0]
    # Reported against its own limit, in both places.
    assert gate["error"].startswith("timed out after 3 s") and gate["seconds"] == 3.0


@pytest.mark.parametrize("args,message", [
    ([FIXTURES / "rows.py", "--task", "rms_nrom"], "unknown task 'rms_nrom'; known tasks:"),
    ([FIXTURES / "missing.py", "--task", "rms_norm"], "missing.py: candidate file not found"),
    ([FIXTURES, "--task", "rms_norm"], "rms_norm: is a directory, expected a .py file"),
    ([FIXTURES / "no_entry.py", "--task", "rms_norm"], "no_entry.py: no entry function 'rms_norm'"),
    (["SYNTAX", "--task", "rms_norm"], "line 4: syntax error"),
    ([FIXTURES / "rows.py", "--task", "rms_norm", "--gate", "speed"], "unknown gate 'speed'"),
    ([FIXTURES / "rows.py", "--task", "rms_norm", "--device", "tpu"], "unknown device 'tpu'"),
])
def test_unusable_input_exits_2_with_one_line(args, message, tmp_path):
    if args[0] == "SYNTAX":
        bad = tmp_path / "syntax_error.py"
        bad.write_text("import torch\n\n\ndef rms_norm(x, weight, eps)\n    return x\n")
        args = [bad, *args[1:]]
    result = run(*args, "--json")
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], result.output


def test_audit_api_reuses_a_sandbox_and_renders_feedback():
    task = get_task("rms_norm")
    with Sandbox("cpu") as box:
        bad = audit(FIXTURES / "caches_by_shape.py", task, gates=["correctness"], sandbox=box)
        good = audit(FIXTURES / "torch_only.py", task, gates=["correctness"], sandbox=box)
        crashed = audit(FIXTURES / "segfault.py", task, gates=["correctness"], sandbox=box)
        after = audit(FIXTURES / "rows.py", task, gates=["correctness"], sandbox=box)
    assert bad.verdict == "reject" and "[AC002]" in bad.feedback and "fix:" in bad.feedback
    assert good.verdict == "accept" and "[AC005]" in good.feedback
    assert crashed.verdict == "reject" and "SIGSEGV" in crashed.gates[0].error
    assert "out-of-bounds" in crashed.feedback
    assert after.verdict == "accept"


def test_accept_names_its_device_and_coverage_in_text():
    result = run(FIXTURES / "rows.py", "--task", "rms_norm", "--device", "cpu", "--gate", "dynamic")
    assert result.exit_code == 0, result.output
    assert "dynamic      pass" in result.output and "batch 1-512 (14 sizes) + " in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("accept on cpu (cpu interpreter: not a GPU verdict) (")
    assert re.search(r"dynamic batch 1-512 \(14 sizes\) \+ \d+ beyond \(sweep seed \d+\), float32$",
                     last), last


def test_a_candidate_that_raises_at_import_is_rejected_once_with_the_exception(tmp_path):
    bad = tmp_path / "raises.py"
    bad.write_text("import torch\nraise RuntimeError('boom at import')\n\n\ndef rms_norm(x, weight, eps):\n"
                   "    return x\n")
    result = run(bad, "--task", "rms_norm", "--device", "cpu", "--json")
    assert result.exit_code == 1, result.output
    gates = json.loads(result.output)["gates"]
    # The first gate that loads it says why; the next would only repeat it (not "'NoneType' object
    # is not callable").
    assert [g["gate"] for g in gates] == ["static", "dynamic"]
    assert gates[-1]["error"] == ("candidate failed to import: RuntimeError: boom at import "
                                  "(at raises.py line 2)")


def test_a_kernel_the_cpu_interpreter_cannot_run_cannot_be_checked_here(tmp_path):
    asm = tmp_path / "asm.py"
    asm.write_text("""import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, out_ptr, H, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(out_ptr + row * H + cols, y, mask=cols < H)


def rms_norm(x, weight, eps):
    out = torch.empty_like(x, dtype=torch.float32)
    _k[(x.shape[0],)](x.contiguous(), out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out.to(x.dtype)
""")
    result = run(asm, "--task", "rms_norm", "--device", "cpu", "--gate", "dynamic")
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot be checked here (the CPU interpreter does not support" in lines[0]
    assert "inline_asm not supported in interpreter mode" in lines[0] and "[float32, H=256]" in lines[0]
