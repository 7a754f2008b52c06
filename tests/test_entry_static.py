"""The static gate follows an `--entry` into its module as it follows a file: through the entry's
wrapper, renamed imports of an adapter, module-level aliases and imports inside the package; a
torch op as entry gets the finding a call of it in a file gets; a callee without Python source is
named in a BI000 warning, never passed silently."""

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentloop.cli import app
from gates.contract import get_task
from gates.static import static_gate

CORPUS = Path(__file__).parents[1] / "tasks" / "rms_norm" / "candidates"
VARIANT = CORPUS / "split_row_small_batch.py"
"""Batch-variant: the split count of each row's reduction is chosen from the batch (BI001 twice)."""
RMS = get_task("rms_norm")


@pytest.fixture
def package(tmp_path, monkeypatch):
    """`mykern`, a package on the import path with the variant kernel as `mykern.split`."""
    root = tmp_path / "mykern"
    root.mkdir()
    (root / "__init__.py").write_text("")
    shutil.copy(VARIANT, root / "split.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return root


def audit(*args, task="rms_norm"):
    """`agentloop audit ... --gate static --json`: (exit code, the static gate's JSON)."""
    result = CliRunner().invoke(app, ["audit", *map(str, args), "--task", task, "--gate", "static",
                                      "--device", "cpu", "--json"])
    assert result.exit_code in (0, 1), result.output
    (static,) = json.loads(result.output)["gates"]
    return result.exit_code, static


def rules(static) -> list[str]:
    return [f["rule"] for f in static["findings"]]


def test_the_variant_kernel_audited_by_entry_directly_is_rejected(package):
    code, static = audit("--entry", "mykern.split:rms_norm")
    assert code == 1 and rules(static) == ["BI001", "BI001"], static
    # The lines are the module's: the two launches.
    lines = (package / "split.py").read_text().splitlines()
    assert all("_kernel[" in lines[f["line"] - 1] for f in static["findings"])


def test_the_variant_kernel_through_an_adapter_with_a_renamed_import_is_rejected(package, tmp_path):
    adapter = tmp_path / "adapter.py"
    adapter.write_text("from mykern.split import rms_norm as rn\n\n\n"
                       "def rms_norm(x, weight, eps):\n"
                       "    return rn(x, weight, eps)\n")
    code, static = audit("--entry", "mykern.split:rms_norm", "--adapter", adapter)
    assert code == 1 and rules(static) == ["BI001", "BI001"], static


@pytest.mark.parametrize("module,text,entry", [
    # an alias chain in another module of the package, which imports the kernel absolutely
    ("api.py", "from mykern.split import rms_norm as _impl\n\nfast = _impl\nrms_norm_fast = fast\n",
     "mykern.api:rms_norm_fast"),
    # the package re-exports it relatively
    ("__init__.py", "from .split import rms_norm\n", "mykern:rms_norm"),
    # an alias in the kernel's own module
    ("split.py", VARIANT.read_text() + "\n\nrms_norm_v2 = rms_norm\n", "mykern.split:rms_norm_v2"),
], ids=["alias-chain-in-the-package", "re-exported-by-the-package", "alias-in-the-module"])
def test_the_variant_kernel_through_a_module_level_alias_is_rejected(package, module, text, entry):
    (package / module).write_text(text)
    code, static = audit("--entry", entry)
    assert code == 1 and rules(static) == ["BI001", "BI001"], static


def test_an_honest_kernel_through_an_alias_still_passes_without_findings(package):
    shutil.copy(CORPUS / "row_per_program.py", package / "rows.py")
    (package / "api.py").write_text("from mykern.rows import rms_norm as _impl\n\nrms_norm_fast = _impl\n")
    code, static = audit("--entry", "mykern.api:rms_norm_fast")
    assert code == 0 and static["passed"] and static["findings"] == [], static


def test_a_torch_vendor_op_as_entry_gets_the_finding_a_call_in_a_file_gets(package):
    code, static = audit("--entry", "torch.nn.functional:linear", task="linear")
    (finding,) = static["findings"]
    assert code == 0 and finding["rule"] == "BI005" and finding["severity"] == "warning", static
    assert "`linear` on batched tensor `x`" in finding["message"] and finding["line"] is None
    in_a_file = static_gate("import torch\n\ndef linear(x, weight, bias):\n"
                            "    return torch.nn.functional.linear(x, weight, bias)\n", get_task("linear"))
    assert [(f.rule, f.message) for f in in_a_file.findings] == [(finding["rule"], finding["message"])]


def test_an_entry_whose_callee_has_no_source_is_named_in_a_warning(package):
    (package / "ext.py").write_text("from mykern._fast import rms_norm_cuda\n\n"
                                    "fast = rms_norm_cuda\n\n\n"
                                    "def rms_norm(x, weight, eps):\n"
                                    "    return fast(x, weight, eps)\n")
    code, static = audit("--entry", "mykern.ext:rms_norm")
    (finding,) = static["findings"]
    assert code == 0 and finding["rule"] == "BI000" and finding["severity"] == "warning", static
    assert finding["line"] == 7 and "`fast`, bound to `mykern._fast.rms_norm_cuda`," in finding["message"]
    assert "not checked" in finding["message"]


# The same mechanism on files -------------------------------------------------------------------
def test_a_file_whose_entry_redefines_the_name_it_wraps_is_followed_into_the_first_definition():
    source = VARIANT.read_text() + textwrap.dedent('''

    _variant = rms_norm

    def rms_norm(x, weight, eps):
        return _variant(x, weight, eps)
    ''')
    assert [f.rule for f in static_gate(source, RMS).findings] == ["BI001", "BI001"]


def test_a_file_whose_entry_is_a_torch_op_gets_bi005_and_an_extension_entry_is_named():
    linear = get_task("linear")
    result = static_gate("from torch.nn.functional import linear\n", linear)
    assert [(f.rule, f.line) for f in result.findings] == [("BI005", 1)]
    result = static_gate("from torch._C import _nn\n\nlinear = _nn.linear\n", linear)
    assert [(f.rule, f.line) for f in result.findings] == [("BI005", 3)]
    result = static_gate("from mykern._fast import rms_norm_cuda as rms_norm\n", RMS)
    (finding,) = result.findings
    assert finding.rule == "BI000" and "(bound to `mykern._fast.rms_norm_cuda`)" in finding.message


def test_a_call_on_batched_rows_into_a_value_without_source_is_named():
    source = textwrap.dedent('''
    import torch
    from torch._C import _add_docstr

    fused = _add_docstr(torch._C._nn.linear, "docs")

    def rms_norm(x, weight, eps):
        return fused(x, weight, None)
    ''')
    (finding,) = static_gate(source, RMS).findings
    assert finding.rule == "BI000" and finding.line == 8 and finding.severity == "warning"
    assert "`fused`, bound to `_add_docstr(torch._C._nn.linear, 'docs')`," in finding.message


# Findings in the package's other modules, and the library's own settings ------------------------
def test_a_finding_in_another_module_of_the_package_names_that_file_and_its_line(package):
    (package / "api.py").write_text("from mykern.split import rms_norm as _impl\n\nrms_norm_fast = _impl\n")
    code, static = audit("--entry", "mykern.api:rms_norm_fast")
    assert code == 1 and rules(static) == ["BI001", "BI001"], static
    lines = (package / "split.py").read_text().splitlines()
    for f in static["findings"]:
        where, _, _ = f["message"].partition(": ")
        assert f["line"] is None and where.startswith("mykern/split.py line "), f["message"]
        assert "_kernel[" in lines[int(where.rsplit(" ", 1)[1]) - 1]
        assert "line 1000" not in f["message"]  # no inlining offsets leak into the text


LIBRARY = '''
import os
import importlib

import torch

_CACHE = os.environ.get("MYKERN_CACHE_DIR")
_VENDOR = importlib.import_module(f"mykern._{os.environ.get('MYKERN_VENDOR', 'rows')}")


def _op(name):
    return getattr(_VENDOR, name)


def rms_norm(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
'''


def test_a_librarys_settings_and_dispatch_are_warnings_in_place_and_errors_in_a_candidate(package):
    (package / "lib.py").write_text(LIBRARY)
    code, static = audit("--entry", "mykern.lib:rms_norm")
    assert code == 0 and static["passed"], static
    evasion = [f for f in static["findings"] if f["rule"] != "BI005"]  # torch's mean: a possible hazard
    assert {f["rule"] for f in evasion} == {"BI009", "BI012", "BI013"}, static
    assert all(f["severity"] == "warning" and "library audited in place" in f["message"] for f in evasion)
    # The same code written as a candidate: an agent's, written to pass, so the rules are errors.
    result = static_gate(LIBRARY, RMS)
    assert not result.passed and {f.rule for f in result.findings if f.severity == "error"} == \
        {"BI009", "BI012", "BI013"}


def test_an_adapters_own_environment_read_stays_an_error(package, tmp_path):
    (package / "lib.py").write_text(LIBRARY)
    adapter = tmp_path / "adapter.py"
    adapter.write_text("import os\n\nfrom mykern.lib import rms_norm as rn\n\n\n"
                       "def rms_norm(x, weight, eps):\n"
                       "    if os.environ.get('OPENAI_API_KEY'):\n"
                       "        return x\n"
                       "    return rn(x, weight, eps)\n")
    code, static = audit("--entry", "mykern.lib:rms_norm", "--adapter", adapter)
    (error,) = [f for f in static["findings"] if f["severity"] == "error"]
    assert code == 1 and error["rule"] == "BI009"
    assert error["message"].startswith("adapter adapter.py line 7:")
