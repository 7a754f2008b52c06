"""`agentloop audit --entry package.module:function [--adapter FILE]`: an installed library's
callable audited in place. The library (a stand-in, tests/fixtures/library/fakegems) is put
outside the project on PYTHONPATH, as pip would install it; it runs only in the caged runner."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentloop.cli import app
from gates.contract import get_task
from gates.library import parse_spec, resolve_entry, static_result
from gates.runner.loader import CandidateError

FIXTURES = Path(__file__).parent / "fixtures" / "library"
ADAPTERS = FIXTURES / "adapters"
RMS = get_task("rms_norm")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """The fake library installed in a site directory on the import path of this process and
    of the judge and runner processes."""
    site = tmp_path / "site"
    shutil.copytree(FIXTURES / "fakegems", site / "fakegems")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


def run(*args):
    return CliRunner().invoke(app, ["audit", *map(str, args), "--task", "rms_norm", "--device", "cpu"])


def test_autograd_function_apply_is_audited_by_every_gate_in_the_runner(site):
    result = run("--entry", "fakegems.ops.fused:RMSNormFunction.apply", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["candidate"] == "fakegems.ops.fused:RMSNormFunction.apply" and data["verdict"] == "accept"
    assert [g["gate"] for g in data["gates"]] == ["static", "dynamic", "correctness"]
    assert "fakegems" not in sys.modules  # the library ran caged, never in this process


def test_adapter_maps_the_signature_and_both_gates_see_the_variant_library_code(site):
    result = run("--entry", "fakegems.ops.norm:rms_norm_split", "--adapter", ADAPTERS / "rms_norm_split.py",
                 "--gate", "static", "--gate", "dynamic", "--json")
    assert result.exit_code == 1, result.output
    static, dynamic = json.loads(result.output)["gates"]
    # The static gate read the library module's source: the finding is on its line.
    (finding,) = static["findings"]
    assert finding["rule"] == "BI001" and "M < 16" in finding["message"]
    source = (site / "fakegems" / "ops" / "norm.py").read_text().splitlines()
    assert "CHUNK=chunk" in source[finding["line"] - 1]  # the launch in the library
    assert dynamic["counterexample"]["batch_size"] == 16


@pytest.mark.parametrize("args,message", [
    (["--entry", "fakegems.ops.norm"], "expected package.module:function"),
    (["--entry", "fakegems.nosuch:rms_norm"], "no module named 'fakegems.nosuch' on the import path"),
    (["--entry", "fakegems.ops.norm:layer_norm"], "has no attribute 'layer_norm'"),
    (["--entry", "fakegems.ops.fused:RMSNormFunction.apply", "--adapter", ADAPTERS / "rms_norm.py"],
     "does not import from 'fakegems.ops.fused'"),
    (["--adapter", ADAPTERS / "rms_norm.py"], "--adapter goes with --entry"),
    ([FIXTURES / "adapters" / "rms_norm.py", "--entry", "fakegems.ops.norm:rms_norm"], "not both"),
    (["--entry", "fakegems.ops.norm:rms_norm", "--adapter", FIXTURES / "missing.py"], "not found"),
])
def test_unusable_entries_exit_2_with_one_line(site, args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_a_module_that_fails_to_import_in_the_runner_is_unusable_input(site):
    result = run("--entry", "fakegems.broken:rms_norm", "--gate", "dynamic")
    assert result.exit_code == 2, result.output
    assert "fakegems.broken needs a CUDA device at import" in result.output


def test_static_source_is_the_module_then_the_entry(site):
    entry = resolve_entry("fakegems.ops.norm:rms_norm", RMS)
    assert entry.code.splitlines()[-1] == "from fakegems.ops.norm import rms_norm as rms_norm"
    # The module's own rms_norm keeps working under another name; the entry calls it.
    assert entry.static_source.endswith("_audited_rms_norm = rms_norm\ndef rms_norm(x, weight, eps):\n"
                                        "    return _audited_rms_norm(x, weight, eps)\n")
    assert parse_spec("a.b:C.apply") == ("a.b", "C.apply")
    with pytest.raises(CandidateError):
        parse_spec("a.b:C:d")


def test_findings_on_the_adapter_name_its_line(site, tmp_path):
    adapter = tmp_path / "scaled.py"
    adapter.write_text("from fakegems.ops.norm import rms_norm as _norm\n\n\n"
                       "def rms_norm(x, weight, eps):\n"
                       "    return _norm(x, [x.shape[-1]], weight, eps) * (1.0 / x.shape[0])\n")
    result = static_result(resolve_entry("fakegems.ops.norm:rms_norm", RMS, adapter), RMS)
    assert not result.passed
    on_adapter = [f for f in result.findings if f.message.startswith("adapter scaled.py line 5: ")]
    assert on_adapter and on_adapter[0].line is None, result.findings
