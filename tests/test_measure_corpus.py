"""bench/measure_corpus.py on the CPU: the two rms_norm Triton candidates, plain-torch candidates
that break in every way the oracle must tell apart, and a small ragged task whose only batch
dependence is the padded length. One run of the script (children in parallel) feeds the tests."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import yaml

from gates.contract import load_task

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "measure_corpus.py"

RMS_REF = '''
def rms_norm(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
'''

# Plain-torch rms_norm candidates, each with the label the oracle must give it.
RMS_CANDIDATES = {
    "wrong_values.py": ("broken", "import torch\n\ndef rms_norm(x, weight, eps):\n    return x * 2\n"),
    "wrong_shape.py": ("broken", "import torch\n" + RMS_REF + "\n_f = rms_norm\n\n"
                       "def rms_norm(x, weight, eps):\n    return _f(x, weight, eps)[:, :-1]\n"),
    "syntax_error.py": ("broken", "import torch\n\ndef rms_norm(x, weight, eps)\n    return x\n"),
    "spins.py": ("broken", "import torch\n\ndef rms_norm(x, weight, eps):\n    while True:\n        pass\n"),
    "aborts.py": ("broken", "import os\n\ndef rms_norm(x, weight, eps):\n    os.abort()\n"),
    # One ulp of difference on every other call: correct, batch-independent, not deterministic.
    "flaky_ulp.py": ("variant", "import torch\n" + RMS_REF + textwrap.dedent('''
        _f, _calls = rms_norm, [0]

        def rms_norm(x, weight, eps):
            _calls[0] += 1
            out = _f(x, weight, eps)
            return torch.nextafter(out, out + 1) if _calls[0] % 2 else out
        ''')),
    # Float64 math once the batch holds 3 rows or more: correct, deterministic, batch-variant.
    "float64_from_three_rows.py": ("variant", "import torch\n" + RMS_REF + textwrap.dedent('''
        _f = rms_norm

        def rms_norm(x, weight, eps):
            if x.shape[0] < 3:
                return _f(x, weight, eps)
            xd = x.double()
            out = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
            return out.to(x.dtype)
        ''')),
}

TOY_TASK = {
    "name": "toy_decode", "summary": "toy ragged attention", "entry": "toy_decode",
    "reference": "toy_decode/reference.py", "batch_axis": "B",
    "args": [{"name": "q", "axes": ["B", "D"], "batched": True},
             {"name": "k_cache", "axes": ["B", "L", "D"], "batched": True, "padded_axis": "L"},
             {"name": "seq_lens", "axes": ["B"], "dtype": "int32", "batched": True},
             {"name": "scale", "kind": "scalar", "value": 0.5}],
    "outputs": [{"name": "out", "axes": ["B", "D"]}],
    "ragged": {"L": "seq_lens"}, "dtypes": ["float32"],
    "dims": {"D": 8, "L": 16}, "cpu_dims": {"D": 8, "L": 16},
    "shapes": [{"B": 1}, {"B": 5}], "cpu_shapes": [{"B": 1}, {"B": 5}], "bench_shapes": [{"B": 1}],
    "tolerance": {"float32": {"atol": 1e-5, "rtol": 1e-5}},
}
# Each row attends over its own valid keys only: nothing depends on L or on other rows.
TOY_REF = '''import torch


def toy_decode(q, k_cache, seq_lens, scale):
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        k = k_cache[b, : int(seq_lens[b])].float()
        p = torch.softmax(k @ q[b].float() * scale, dim=0)
        out[b] = (p @ k).to(q.dtype)
    return out


def make_inputs(dims, dtype, generator, device):
    B, L, D = dims["B"], dims["L"], dims["D"]
    q = torch.randn(B, D, generator=generator)
    k = torch.randn(B, L, D, generator=generator)
    lens = torch.randint(1, L + 1, (B,), generator=generator, dtype=torch.int32)
    return {"q": q.to(dtype).to(device), "k_cache": k.to(dtype).to(device), "seq_lens": lens.to(device)}
'''
TOY_CANDIDATES = {
    "per_row.py": ("invariant", TOY_REF.split("\n\n\ndef make_inputs")[0]),
    # Float64 math when the padded length exceeds the task's L: only longer co-batched
    # sequences show it.
    "float64_when_padded_long.py": ("variant", TOY_REF.split("\n\n\ndef make_inputs")[0].replace(
        "k = k_cache[b, : int(seq_lens[b])].float()",
        "k = k_cache[b, : int(seq_lens[b])].float()\n"
        "        k = k.double() if k_cache.shape[1] > 16 else k").replace(
        "p = torch.softmax(k @ q[b].float() * scale, dim=0)",
        "p = torch.softmax(k @ q[b].to(k.dtype) * scale, dim=0)")),
}


# Plain-torch greedy_sample candidates (tests/fixtures/greedy_sample): argmax of fixed-point
# keys scaled by the batch's or the row's largest logit; only near-tie rows tell them apart.
GREEDY_CANDIDATES = {"batch_scale_argmax.py": "variant", "row_scale_argmax.py": "invariant"}


def _write_manifest(directory: Path, candidates: dict) -> None:
    entries = [{"file": f, "expected": label, "mechanism": "none" if label == "invariant" else "crash"}
               for f, (label, _) in candidates.items()]
    (directory / "manifest.yaml").write_text(yaml.safe_dump({"candidates": entries}, sort_keys=False))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One run of the script with --write over a copy of rms_norm and the toy task."""
    tasks = tmp_path_factory.mktemp("tasks")
    shutil.copy(REPO / "tasks" / "rms_norm.yaml", tasks)
    shutil.copytree(REPO / "tasks" / "rms_norm", tasks / "rms_norm", ignore=shutil.ignore_patterns("*.py"))
    for module in ("reference.py", "baselines.py"):  # the task file declares production baselines
        shutil.copy(REPO / "tasks" / "rms_norm" / module, tasks / "rms_norm")
    rms = {f: (label, (REPO / "tasks" / "rms_norm" / "candidates" / f).read_text())
           for f, label in (("row_per_program.py", "invariant"), ("split_row_small_batch.py", "variant"))}
    rms |= RMS_CANDIDATES
    rms["flaky_ulp.py"] = ("invariant", rms["flaky_ulp.py"][1])  # a wrong expectation: listed in the doc
    (tasks / "toy_decode" / "candidates").mkdir(parents=True)
    (tasks / "toy_decode.yaml").write_text(yaml.safe_dump(TOY_TASK, sort_keys=False))
    (tasks / "toy_decode" / "reference.py").write_text(TOY_REF)
    shutil.copy(REPO / "tasks" / "greedy_sample.yaml", tasks)
    (tasks / "greedy_sample").mkdir()
    for module in ("reference.py", "baselines.py"):
        shutil.copy(REPO / "tasks" / "greedy_sample" / module, tasks / "greedy_sample")
    greedy = {f: (label, (REPO / "tests" / "fixtures" / "greedy_sample" / f).read_text())
              for f, label in GREEDY_CANDIDATES.items()}
    for name, cands in (("rms_norm", rms), ("toy_decode", TOY_CANDIDATES), ("greedy_sample", greedy)):
        shutil.rmtree(tasks / name / "candidates", ignore_errors=True)
        (tasks / name / "candidates").mkdir()
        for f, (_, src) in cands.items():
            (tasks / name / "candidates" / f).write_text(src)
        _write_manifest(tasks / name / "candidates", cands)
    out, doc = tasks / "result.json", tasks / "corpus.md"
    env = dict(os.environ, AGENTLOOP_TASKS=str(tasks))
    # B=17 is where split_row_small_batch changes its split (and the toy task needs B>1).
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--jobs", "2", "--sizes", "2,17", "--stall", "15",
           "--budget", "20", "--write", "--json", str(out), "--doc", str(doc)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = {r["file"]: r for r in json.loads(out.read_text())["results"]}
    return tasks, results, doc.read_text(), proc.stdout


def test_triton_rms_norm_candidates_get_their_labels(measured):
    _, results, _, _ = measured
    inv = results["row_per_program.py"]
    assert (inv["label"], inv["bi"], inv["deterministic"], inv["correct"]) == ("invariant", True, True, True)
    var = results["split_row_small_batch.py"]
    assert (var["label"], var["bi"], var["correct"]) == ("variant", False, True)
    assert "B=17" in var["detail"]


@pytest.mark.parametrize("file", sorted(RMS_CANDIDATES))
def test_plain_torch_candidates_get_their_labels(measured, file):
    _, results, _, _ = measured
    assert results[file]["label"] == RMS_CANDIDATES[file][0], results[file]["detail"]


def test_details_say_what_went_wrong(measured):
    _, results, _, _ = measured
    assert results["wrong_values.py"]["detail"].startswith("incorrect: out[0]")
    assert "wrong shape" in results["wrong_shape.py"]["detail"]
    assert "syntax error line 3" in results["syntax_error.py"]["detail"]
    assert "timed out (no progress for 15s)" in results["spins.py"]["detail"]
    assert "SIGABRT" in results["aborts.py"]["detail"]
    flaky = results["flaky_ulp.py"]
    assert flaky["deterministic"] is False and flaky["detail"].startswith("nondeterministic")
    f64 = results["float64_from_three_rows.py"]
    assert f64["deterministic"] is True and f64["bi"] is False and "B=17" in f64["detail"]
    for r in results.values():
        assert "\n" not in r["detail"]


def test_padded_length_dependence_shows_only_beside_longer_sequences(measured):
    _, results, _, _ = measured
    assert results["per_row.py"]["label"] == "invariant", results["per_row.py"]["detail"]
    long = results["float64_when_padded_long.py"]
    assert long["label"] == "variant" and "ctx=long" in long["detail"], long["detail"]


def test_near_tie_probe_exposes_a_batch_wide_argmax_scale(measured):
    _, results, _, _ = measured
    assert results["row_scale_argmax.py"]["label"] == "invariant", results["row_scale_argmax.py"]["detail"]
    batch = results["batch_scale_argmax.py"]
    assert (batch["label"], batch["bi"], batch["correct"]) == ("variant", False, True), batch["detail"]
    assert "near-tie probe" in batch["detail"]


def test_write_records_cpu_labels_and_renders_the_doc(measured):
    tasks, results, doc, _ = measured
    manifest = yaml.safe_load((tasks / "rms_norm" / "candidates" / "manifest.yaml").read_text())
    for entry in manifest["candidates"]:
        assert entry["cpu"]["label"] == results[entry["file"]]["label"]
        assert entry["cpu"]["command"].startswith("python bench/measure_corpus.py --device cpu")
        assert "gpu" not in entry
    assert load_task(tasks / "rms_norm.yaml").name == "rms_norm"
    assert "| rms_norm | `row_per_program.py` | original | invariant | none | — | invariant |" in doc
    contradictions = doc.split("## Where the measurement contradicts")[1].split("## Commands")[0]
    assert "`rms_norm/flaky_ulp.py`" in contradictions and "measured **variant**" in contradictions
    assert "`rms_norm/row_per_program.py`" not in contradictions
    assert "- CPU column (" in doc and "GPU column: not measured yet" in doc


def test_from_json_reports_a_previous_run_without_measuring(measured, tmp_path):
    tasks, results, _, _ = measured
    saved = tasks / "result.json"
    env = dict(os.environ, AGENTLOOP_TASKS=str(tasks))
    run = [sys.executable, str(SCRIPT), "--from-json", str(saved)]
    ok = subprocess.run(run + ["--device", "cpu"], env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "measuring" not in ok.stdout
    assert f"{len(results)} candidates:" in ok.stdout
    wrong = subprocess.run(run + ["--device", "cuda"], env=env, capture_output=True, text=True, timeout=120)
    assert wrong.returncode != 0 and "holds cpu results, not cuda" in wrong.stderr


def test_sigterm_kills_the_children_and_still_reports(measured, tmp_path):
    tasks, _, _, _ = measured
    out = tmp_path / "partial.json"
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--tasks", "rms_norm", "--match", "spins",
           "--stall", "300", "--json", str(out)]
    proc = subprocess.Popen(cmd, env=dict(os.environ, AGENTLOOP_TASKS=str(tasks)), stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().startswith("measuring 1 candidates")
    time.sleep(3)  # the child is spinning by now
    proc.terminate()
    stdout, _ = proc.communicate(timeout=60)
    assert "interrupted: reporting the 0 candidates measured so far" in stdout
    assert json.loads(out.read_text())["results"] == []


def test_near_ties_are_planted_within_two_ulps_of_each_maximum():
    spec = importlib.util.spec_from_file_location("measure_corpus", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    x = torch.randn(1, 3, 32, generator=torch.Generator().manual_seed(1))
    got = script.with_near_ties(x, seed=0)
    for vec, old in zip(got.reshape(-1, 32), x.reshape(-1, 32), strict=True):
        changed = (vec != old).nonzero().flatten()
        peak = old.max()
        assert len(changed) == 5 and int(old.argmax()) not in changed.tolist()
        ladder = [peak]
        for _ in range(2):
            ladder = [torch.nextafter(ladder[0], torch.tensor(-1e9))] + ladder
            ladder = ladder + [torch.nextafter(ladder[-1], torch.tensor(1e9))]
        assert vec[changed].tolist() == [float(v) for v in ladder]
    ids = torch.arange(4).view(1, 4)
    assert torch.equal(script.with_near_ties(ids, seed=0), ids)
