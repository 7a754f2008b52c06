"""`agentloop export`: a kernel set as a package that imports and runs without agentloop — in a fresh
virtual environment that has torch and triton but not agentloop — with custom ops that work under
torch.compile (fake implementations) and a mode that routes ATen ops to the set's kernels."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from agentloop.export.build import export_set
from agentloop.export.package import ExportError

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT.parent / "shared" / "llm-runs" / "refine-h200"
TASKS = ["rms_norm", "linear", "softmax", "fused_add_rms_norm"]


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> Path:
    """A virtual environment without agentloop whose only packages are this one's site-packages
    (torch, triton), added as a plain path: their .pth files, the editable agentloop's among them,
    are not run."""
    env = tmp_path_factory.mktemp("fresh-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    target = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    Path(target, "base_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def run_fresh(python: Path, cwd: Path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["TRITON_INTERPRET"] = "1"
    return subprocess.run([str(python), "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_corpus_set_exports_and_runs_without_agentloop(tmp_path, fresh_python):
    package = export_set("corpus", tmp_path, "bi_kernels", device="cpu", tasks=TASKS)
    manifest = json.loads((package / "manifest.json").read_text())
    assert [k["task"] for k in manifest["kernels"]] == sorted(TASKS)
    assert all(k["origin"].startswith("corpus ") and k["verdicts"]["cpu label"] == "invariant"
               for k in manifest["kernels"])
    assert manifest["torch"] and manifest["triton"] and manifest["device"] == "cpu"
    assert manifest["routed_aten_ops"] == ["aten::mm", "aten::addmm", "aten::bmm", "aten::_softmax"]
    done = run_fresh(fresh_python, tmp_path, """
import importlib.util, json
import torch
assert importlib.util.find_spec("agentloop") is None and importlib.util.find_spec("gates") is None
import bi_kernels
torch.manual_seed(0)
x, w = torch.randn(5, 64), torch.randn(64)
out = torch.ops.bi_kernels.rms_norm(x, w, 1e-6)
ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
assert torch.allclose(out, ref, atol=1e-5), (out - ref).abs().max()
assert torch.equal(out[:2], torch.ops.bi_kernels.rms_norm(x[:2], w, 1e-6))  # its rows alone
r = torch.randn(5, 64)
normed, residual = torch.ops.bi_kernels.fused_add_rms_norm(x, r, w, 1e-6)
assert torch.equal(residual, x + r)
compiled = torch.compile(lambda a: torch.ops.bi_kernels.rms_norm(a, w, 1e-6) * 2, backend="aot_eager",
                         fullgraph=True)
assert torch.equal(compiled(x), out * 2)  # traced through the fake implementation
a, b = torch.randn(7, 96), torch.randn(80, 96)
with bi_kernels.set_batch_invariant_mode(device_type="cpu"):
    y, y3 = torch.nn.functional.linear(a, b), torch.nn.functional.linear(a[:3], b)
    s = torch.softmax(a, dim=0)
assert torch.allclose(y, a @ b.t(), atol=1e-4) and torch.equal(y[:3], y3)
assert torch.allclose(s, torch.softmax(a, dim=0), atol=1e-6)
print(json.dumps({"ops": sorted(bi_kernels.OPS), "routed": bi_kernels.ROUTED}))
""")
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["ops"] == sorted(TASKS) and "aten::mm" in said["routed"]


def test_a_kernel_that_calls_the_op_it_replaces_is_refused(tmp_path, fresh_python):
    files = tmp_path / "kernels"
    files.mkdir()
    (files / "linear.py").write_text("import torch\n\n\ndef linear(x, weight, bias):\n"
                                     "    return torch.mm(x, weight.t()) + bias\n")
    export_set(f"files:{files}", tmp_path, "loops", device="cpu", tasks=["linear"])
    done = run_fresh(fresh_python, tmp_path, """
import torch, loops
with loops.set_batch_invariant_mode(device_type="cpu"):
    torch.nn.functional.linear(torch.randn(3, 4), torch.randn(5, 4))
""")
    assert done.returncode != 0 and "cannot replace that op" in done.stderr


@pytest.mark.skipif(not RECORD.is_dir(), reason="the real-model record is not beside this checkout")
def test_a_runs_final_kernels_export_with_their_verdicts_and_speed(tmp_path):
    package = export_set(f"run:{RECORD}:bi-aware", tmp_path, "llm_bi", device="cpu")
    manifest = json.loads((package / "manifest.json").read_text())
    kernels = {k["task"]: k for k in manifest["kernels"]}
    assert len(kernels) == 13 and manifest["not_exported"] == []
    linear = kernels["linear"]
    assert "refine/bi-aware" in linear["origin"] and linear["verdicts"]["dynamic"] == "pass"
    speed = linear["speed"]  # this record predates production baselines: none were timed
    assert speed["device"] == "NVIDIA H200" and speed["speedup_vs_reference"] > 1
    assert [s["dims"]["T"] for s in speed["shapes"]] == [1, 16, 128, 2048]
    assert speed["speedup_vs_production"] is None
    assert (package / "kernels" / "linear.py").read_text().count("@triton.jit") >= 1


def test_bad_sets_are_one_line_errors(tmp_path):
    from agentloop.model.config import ModelInputError

    with pytest.raises(ModelInputError, match="unknown kind 'nope'"):
        export_set("nope:x", tmp_path, "p", device="cpu")
    with pytest.raises(ModelInputError, match="not a run directory"):
        export_set(f"run:{tmp_path}", tmp_path, "p", device="cpu")
    with pytest.raises(ExportError, match="no kernel to export"):
        export_set("eager", tmp_path, "p", device="cpu")
    with pytest.raises(ExportError, match="not a Python identifier"):
        export_set("corpus", tmp_path, "my-kernels", device="cpu", tasks=["rms_norm"])
    missing = tmp_path / "k.py"
    missing.write_text("def other(x):\n    return x\n")
    with pytest.raises(ModelInputError, match="no entry function 'rms_norm'"):
        export_set(f"files:rms_norm={missing}", tmp_path, "p", device="cpu")
