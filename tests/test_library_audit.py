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


# bench/library_audit.py: the adapters of real libraries, the runner script and its document ---------
sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
import library_audit  # noqa: E402

from gates.library import _adapter_for_static  # noqa: E402
from gates.source import read_candidate  # noqa: E402


@pytest.mark.parametrize("audit", library_audit.AUDITS, ids=lambda a: f"{a.library}-{a.task}")
def test_every_library_adapter_defines_the_entry_and_imports_what_it_audits(audit):
    source = read_candidate(library_audit.REPO / audit.adapter, get_task(audit.task))
    module, attr = parse_spec(audit.entry)
    assert _adapter_for_static(source, module)[1], f"{audit.adapter} does not import from {module}"
    assert attr.split(".")[0] in source
    assert audit.library in library_audit.LIBRARIES


def test_library_audit_runs_audits_and_renders_the_document(site, tmp_path):
    audits = [library_audit.Audit("fakegems", "rms_norm", "fakegems.ops.norm:rms_norm_split",
                                  str(ADAPTERS / "rms_norm_split.py")),
              library_audit.Audit("fakegems", "rms_norm", "fakegems.broken:rms_norm",
                                  str(ADAPTERS / "rms_norm.py"))]
    out = tmp_path / "library_audit.json"
    data = library_audit.run_audits(audits, "cpu", out, jobs=2, budget=600, timeout=120)
    assert json.loads(out.read_text()) == data
    split, broken = sorted(data["audits"], key=lambda r: r["entry"], reverse=True)
    assert split["exit"] == 1 and split["verdict"]["verdict"] == "reject"
    assert broken["exit"] == 2 and "does not import from 'fakegems.broken'" in broken["error"]
    doc = library_audit.render(data)
    row = next(line for line in doc.splitlines() if "rms_norm_split`" in line)
    assert "| reject | FAIL | FAIL |" in row and "B=16" in row
    assert "unusable" in doc and "[BI001]" in doc


def test_library_audit_merges_runs_a_later_result_wins_unless_it_was_cut():
    def run(command, rows):
        return {"device": "cuda", "gpu": "H200", "torch": "2.11", "triton": "3.6", "python": "3.12",
                "date": "2026-12-01", "libraries": {}, "command": command, "audits": rows}

    def row(task, error=None, verdict=None, exit=None):
        return {"library": "fla", "task": task, "entry": "fla.x:y", "adapter": "a.py", "exit": exit,
                "seconds": 1.0, "verdict": verdict, "error": error}

    accept = {"verdict": "accept", "gates": []}
    cut = "not run: the 5 s budget was spent"
    first = run("one", [row("softmax", verdict=accept, exit=0), row("rms_norm", cut)])
    second = run("two", [row("rms_norm", verdict=accept, exit=0), row("softmax", cut)])
    merged = library_audit.merge([first, second])
    assert merged["command"] == "one ; two"
    assert [library_audit.summary(r) for r in merged["audits"]] == ["accept", "accept"]
