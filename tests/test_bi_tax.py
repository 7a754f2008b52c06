"""bench/bi_tax.py on the CPU: one task measured end to end (its baselines through the dynamic
gate, its invariant corpus kernels timed beside them), then docs/bi_tax.md rendered from the JSON
alone, as the GPU run's JSON is rendered here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "bi_tax.py"
sys.path.insert(0, str(REPO / "bench"))

import bi_tax  # noqa: E402


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("bi_tax") / "linear.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tasks", "linear",
                          "--json", str(out)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(out.read_text())


def test_the_cpu_run_times_kernels_and_baselines_and_gates_the_baselines(measured):
    assert measured["device"] == "cpu"
    assert measured["command"].startswith("python bench/bi_tax.py --device cpu")
    (entry,) = measured["tasks"]
    assert entry["task"] == "linear" and entry["kernels"]
    base = {b["name"]: b for b in entry["baselines"]}
    assert set(base) == {"torch_linear"}  # compiled ones only with --compile
    # The dynamic gate's verdict on the vendor GEMM, with the batch that shows it.
    assert base["torch_linear"]["bi"] is False and "differs in a batch of" in base["torch_linear"]["detail"]
    batches = [s["batch"] for s in entry["shapes"]]
    assert batches == [1, 8]  # bench shapes capped at 8 rows on a CPU; the decode T=8 shape added
    for s in entry["shapes"]:
        assert s["regime"] == "decode" and s["reference_ms"] > 0
        assert s["baselines"]["torch_linear"] > 0 and all(v > 0 for v in s["kernels"].values())


def test_the_tax_is_the_best_kernel_over_the_fastest_baseline(measured):
    (entry,) = measured["tasks"]
    s = entry["shapes"][0]
    f = bi_tax.shape_figures(s, set())
    best = min(s["kernels"].values())
    assert f["kernel_ms"] == best and f["tax"] == pytest.approx(best / s["baselines"]["torch_linear"])
    assert f["bi_baseline"] is None  # torch_linear is not batch-invariant


def test_the_document_renders_from_the_json_alone(measured, tmp_path):
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(measured))
    doc = tmp_path / "bi_tax.md"
    bi_tax.main(["--from-json", str(saved), "--write", "--doc", str(doc)])
    text = doc.read_text()
    assert measured["command"] in text and "CPU run" in text
    assert "| linear | " in text and "`torch_linear` not BI" in text
    assert "| decode | mid | prefill |" in text


def test_regimes_follow_the_batch_size():
    assert [bi_tax.regime(b) for b in (1, 8, 9, 256, 2047, 2048, 4096)] == \
        ["decode", "decode", "mid", "mid", "mid", "prefill", "prefill"]


def test_gpu_shapes_cover_decode_mid_and_prefill():
    from gates.contract import get_task

    shapes = bi_tax.tax_shapes(get_task("rms_norm"), "cuda")
    assert [s["T"] for s in shapes] == [1, 8, 32, 256, 4096]
    assert {bi_tax.regime(s["T"]) for s in shapes} == set(bi_tax.REGIMES)
