"""Reports of a run directory, from a results database written through the real Store: 2 styles x
2 modes x 2 tasks with candidates, gate results, timings and exchanges as the runner writes them."""

from __future__ import annotations

import base64
import io
import json
import math
import re
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from agentloop.cli import app
from agentloop.results.plots import best_speedup_curves
from agentloop.results.report import ReportError, load_run, write_reports
from agentloop.results.store import Store

STAGES = ("compile", "static", "dynamic", "correctness", "benchmark")
SUMMARY_KEYS = {"style", "mode", "provider", "tasks", "correct", "bi_pass", "bi_pass_rate", "geomean_speedup",
                "geomean_production_speedup", "llm_calls", "input_tokens", "output_tokens"}
COMPILE_ERROR = "error: SyntaxError: invalid syntax (line 3) | expected <class 'int'>"

# (style, mode, task) -> candidates in iteration order, the final one (iteration or None), whether
# the final kernel passed the closing BI audit, LLM calls and tokens. A candidate's `fails` maps a
# stage to why it failed: a rule id (an error finding), "mismatch" (a BI counterexample) or
# "error: ..." (the stage could not run it); `rejected_by` names the stage that stopped it.
LOOPS = {
    ("refine", "baseline", "rms_norm"): dict(cands=[
        dict(rejected_by="compile", fails={"compile": COMPILE_ERROR}),
        dict(speedup=1.5, fails={"dynamic": "mismatch"}),
        dict(speedup=2.0, fails={"static": "BI002"})], final=3, bi_pass=0, llm=3, tokens=(300, 900)),
    ("refine", "baseline", "softmax"): dict(cands=[
        dict(rejected_by="correctness", fails={"correctness": "CR005"}),
        dict(speedup=0.8),
        dict(rejected_by="extract")], final=2, bi_pass=1, llm=3, tokens=(250, 600)),
    ("refine", "bi-aware", "rms_norm"): dict(cands=[
        dict(rejected_by="static", fails={"static": "BI001"}),
        dict(rejected_by="dynamic", fails={"dynamic": "mismatch"}),
        dict(speedup=1.2)], final=3, bi_pass=1, llm=4, tokens=(400, 1000)),
    ("refine", "bi-aware", "softmax"): dict(cands=[
        dict(rejected_by="correctness", fails={"correctness": "CR005"}),
        dict(rejected_by="compile", fails={"compile": COMPILE_ERROR}),
        dict(rejected_by="static", fails={"static": "BI001"})], final=None, bi_pass=0, llm=3,
        tokens=(350, 700)),
    ("evolve", "baseline", "rms_norm"): dict(cands=[
        dict(speedup=1.1),
        dict(speedup=3.0, fails={"dynamic": "mismatch"}),
        dict(speedup=2.5)], final=2, bi_pass=0, llm=1, tokens=(500, 1500)),
    ("evolve", "baseline", "softmax"): dict(cands=[
        dict(speedup=1.4),
        dict(rejected_by="benchmark", fails={"benchmark": "error: timed out after 60 s"}),
        dict(rejected_by="correctness", fails={"correctness": "CR005"})], final=1, bi_pass=1, llm=1,
        tokens=(450, 1200)),
    ("evolve", "bi-aware", "rms_norm"): dict(cands=[
        dict(speedup=1.1),
        dict(rejected_by="dynamic", fails={"dynamic": "mismatch"}),
        dict(speedup=1.3)], final=3, bi_pass=1, llm=1, tokens=(520, 1400)),
    ("evolve", "bi-aware", "softmax"): dict(cands=[
        dict(speedup=1.4),
        dict(speedup=1.6),
        dict(rejected_by="static", fails={"static": "BI003"})], final=2, bi_pass=1, llm=1,
        tokens=(480, 1300)),
}


def add_candidate(store: Store, style: str, mode: str, task: str, iteration: int, *,
                  speedup: float | None = None, rejected_by: str | None = None,
                  fails: dict[str, str] | None = None) -> int:
    """Write one concluded candidate and its stage results the way agentloop.loop.records does."""
    fails = fails or {}
    cell = f"{style}/{mode}/replay"
    reached = STAGES[: STAGES.index(rejected_by) + 1] if rejected_by in STAGES else \
        (() if rejected_by == "extract" else STAGES)
    why = fails.get(rejected_by or "", "")
    bi = lambda stage: None if stage not in reached else int(stage not in fails)
    cid = store.add_candidate(
        cell=cell, task=task, style=style, mode=mode, provider="replay", iteration=iteration,
        parent=None, hash=f"{cell}:{task}:{iteration}",
        code=None if rejected_by == "extract" else f"def {task}(x):\n    return x  # {iteration}\n",
        status="rejected" if rejected_by else "accepted", rejected_by=rejected_by,
        rule=why if why[:2] in ("BI", "CR") else None,
        correct=1 if not rejected_by else (0 if rejected_by in ("correctness", "benchmark") else None),
        bi_static=bi("static"), bi_dynamic=bi("dynamic"), speedup=speedup)
    for stage in reached:
        reason = fails.get(stage)
        findings = [{"rule": reason, "severity": "error", "line": 7, "message": f"{reason} fired here",
                     "hint": "fix it"}] if reason and reason[:2] in ("BI", "CR") else []
        counterexample = {"output": 0, "row": 1, "batch_size": 16, "position": 5, "reference_batch_size": 1,
                          "max_abs_diff": 0.0039, "mismatched_elements": 4,
                          "context": "co-batched with 15 other rows"} if reason == "mismatch" else None
        error = reason[len("error: "):] if reason and reason.startswith("error: ") else None
        enforced = mode == "bi-aware" or stage not in ("static", "dynamic")
        store.add_gate_result(cid, stage, reason is None, enforced, 0.25, findings, counterexample, error)
        if stage == "benchmark" and reason is None:
            store.add_timing(cid, {"T": 4, "H": 256}, 0.01, 0.01 * speedup, speedup)
    return cid


def make_run(run_dir: Path, loops: dict = LOOPS, campaign: bool = True) -> Path:
    """A run directory with results.sqlite (and campaign.yaml) as a finished campaign leaves it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    store = Store(run_dir / "results.sqlite")
    try:
        for (style, mode, task), loop in loops.items():
            cell = f"{style}/{mode}/replay"
            ids = [add_candidate(store, style, mode, task, i + 1, **c) for i, c in enumerate(loop["cands"])]
            for _ in range(loop["llm"]):
                store.add_exchange(cell=cell, task=task, role="coder", request_hash="h", request="[]",
                                   response="```python\n...\n```", provider="replay", model="replay",
                                   input_tokens=0, output_tokens=0, latency_s=0.0)
            final = loop["final"]
            store.finish_task(
                cell=cell, task=task, style=style, mode=mode, provider="replay",
                final_candidate=ids[final - 1] if final else None, correct=int(final is not None),
                bi_pass=loop["bi_pass"], speedup=loop["cands"][final - 1]["speedup"] if final else None,
                llm_calls=loop["llm"], input_tokens=loop["tokens"][0], output_tokens=loop["tokens"][1],
                wall_s=12.5)
    finally:
        store.close()
    if campaign:
        (run_dir / "campaign.yaml").write_text(
            "name: fixture-campaign\ntasks: [rms_norm, softmax]\nstyles: [refine, evolve]\n"
            "modes: [baseline, bi-aware]\nmodel: replay\nbudget: {iterations: 3}\ndevice: cpu\nseed: 0\n")
    return run_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = make_run(tmp_path_factory.mktemp("run"))
    write_reports(run_dir)
    return run_dir


def cell(summary: dict, style: str, mode: str) -> dict:
    return next(c for c in summary["cells"] if (c["style"], c["mode"]) == (style, mode))


def test_summary_has_spec_keys_and_hand_computed_values(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary) == {"campaign", "cells", "retention"}
    assert summary["campaign"] == "fixture-campaign"
    assert [(c["style"], c["mode"]) for c in summary["cells"]] == [
        ("refine", "baseline"), ("refine", "bi-aware"), ("evolve", "baseline"), ("evolve", "bi-aware")]
    for c in summary["cells"]:
        assert set(c) == SUMMARY_KEYS and c["provider"] == "replay" and c["tasks"] == 2
    # The geomean is over the correct tasks only: refine/bi-aware failed softmax, which is not
    # counted as a 1.0x success.
    expected = {("refine", "baseline"): (2, 1, math.sqrt(2.0 * 0.8), 6, 550, 1500),
                ("refine", "bi-aware"): (1, 1, 1.2, 7, 750, 1700),
                ("evolve", "baseline"): (2, 1, math.sqrt(3.0 * 1.4), 2, 950, 2700),
                ("evolve", "bi-aware"): (2, 2, math.sqrt(1.3 * 1.6), 2, 1000, 2700)}
    for (style, mode), (correct, bi_pass, speedup, calls, tin, tout) in expected.items():
        c = cell(summary, style, mode)
        assert (c["correct"], c["bi_pass"], c["llm_calls"], c["input_tokens"], c["output_tokens"]) == \
            (correct, bi_pass, calls, tin, tout)
        # Over the tasks that kept a kernel: refine/bi-aware's softmax kept none and is no BI failure.
        assert c["bi_pass_rate"] == pytest.approx(bi_pass / correct, abs=1e-4)
        assert c["geomean_speedup"] == pytest.approx(speedup, abs=1e-4)
        assert c["geomean_production_speedup"] is None  # no kernel was timed against a baseline
    # Retention over the tasks correct in both cells: refine compares rms_norm only.
    assert summary["retention"] == pytest.approx({"refine": 1.2 / 2.0,
                                                  "evolve": math.sqrt(1.3 * 1.6 / (3.0 * 1.4))}, abs=1e-4)


def test_retention_only_for_styles_run_in_both_modes(tmp_path: Path) -> None:
    loops = {k: v for k, v in LOOPS.items() if k[:2] != ("evolve", "bi-aware")}
    summary = write_reports(make_run(tmp_path / "partial", loops))
    assert len(summary["cells"]) == 3
    assert set(summary["retention"]) == {"refine"}


def test_best_speedup_curve_is_running_best_and_ends_at_the_summary(run_dir: Path) -> None:
    run = load_run(run_dir)
    curves = best_speedup_curves(run.candidates, run.task_results)
    # refine/baseline: rms_norm none (rejected), 1.5, 2.0; softmax none (rejected), 0.8, 0.8: a
    # task without a kernel yet is left out, not counted as 1.0x.
    assert curves["refine", "baseline", "replay"] == pytest.approx(
        [None, math.sqrt(1.5 * 0.8), math.sqrt(2.0 * 0.8)])
    # evolve/baseline keeps its best (3.0) when a slower one follows; the rejected ones do not count.
    assert curves["evolve", "baseline", "replay"] == pytest.approx(
        [math.sqrt(1.1 * 1.4), math.sqrt(3.0 * 1.4), math.sqrt(3.0 * 1.4)])
    summary = json.loads((run_dir / "summary.json").read_text())
    for c in summary["cells"]:
        last = curves[c["style"], c["mode"], c["provider"]][-1]
        assert last == pytest.approx(c["geomean_speedup"], abs=1e-4)


def test_report_md_has_comparison_retention_rejections_and_tasks(run_dir: Path) -> None:
    md = (run_dir / "report.md").read_text()
    assert md.startswith("# Campaign `fixture-campaign`")
    assert ("| refine / bi-aware | 2 | 1/2 (50%) | 1 | 1/1 (100%), 1 without a kernel | 1.20× | - | 7 "
            "| 750 / 1700 |") in md
    assert "| evolve / bi-aware | 2 | 2/2 (100%) | 0 | 2/2 (100%) | 1.44× |" in md
    assert "| refine | 1: rms_norm | 2.00× | 1.20× | 0.60 |" in md
    assert "| evolve | 2: rms_norm, softmax | 2.05× | 1.44× | 0.70 |" in md
    assert "CPU run: speedups are not meaningful" in md  # the campaign ran on a CPU
    # Rejections by gate and rule, counted per mode (baseline, bi-aware, total).
    assert "| static | BI001 | 0 | 2 | 2 | BI001 fired here |" in md
    assert "| static | BI003 | 0 | 1 | 1 |" in md
    assert "| dynamic | mismatch | 0 | 2 | 2 | rows differ bitwise: batch 16, position 5;" in md
    assert "| correctness | CR005 | 2 | 1 | 3 |" in md
    assert "| extract | - | 1 | 0 | 1 | no code in the answer |" in md
    assert "| benchmark | error | 1 | 0 | 1 | timed out after 60 s |" in md
    assert "| compile | error | 1 | 1 | 2 | SyntaxError: invalid syntax (line 3) \\| expected" in md
    # BI failures that baseline mode only observed.
    observed = md.split("failed without rejecting")[1].split("## Per task")[0]
    assert "| dynamic | mismatch | 2 | 0 | 2 |" in observed and "| static | BI002 | 1 | 0 | 1 |" in observed
    assert "BI001" not in observed
    tasks = md.split("## Per task")[1]
    assert tasks.index("### rms_norm") < tasks.index("### softmax")
    assert "| refine / bi-aware | no | n/a | - | - | - | 3 | 0 | 3 | 12.5 |" in tasks
    assert "| evolve / baseline | yes | no | 3.00× | - | #2 | 3 | 3 | 1 | 12.5 |" in tasks
    assert "![Best speedup so far, per style and mode](plot_best_speedup.png)" in md


def test_report_html_is_self_contained(run_dir: Path) -> None:
    html = (run_dir / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "expected &lt;class &#39;int&#39;&gt;" in html  # text from the database is escaped
    uris = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(uris) == 2
    for data in uris:
        assert Image.open(io.BytesIO(base64.b64decode(data))).format == "PNG"
    for text in ("fixture-campaign", "BI001", "0.60", "rms_norm", "softmax", "1/1 (100%)",
                 "CPU run: speedups are not meaningful"):
        assert text in html


def test_plots_are_valid_nonblank_pngs(run_dir: Path) -> None:
    for name in ("plot_best_speedup.png", "plot_bi_pass_rate.png"):
        image = Image.open(run_dir / name)
        assert image.format == "PNG" and image.width > 400 and image.height > 300
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
        assert len(colours) > 20, name  # lines, bars and text, not a blank canvas


def test_campaign_name_from_argument_then_campaign_file_then_directory(tmp_path: Path) -> None:
    run = make_run(tmp_path / "named-by-dir", {k: v for k, v in LOOPS.items() if k[0] == "refine"},
                   campaign=False)
    assert write_reports(run)["campaign"] == "named-by-dir"
    assert write_reports(run, "given")["campaign"] == "given"
    assert json.loads((run / "summary.json").read_text())["campaign"] == "given"


def test_cli_report_rebuilds_the_reports(tmp_path: Path) -> None:
    run = make_run(tmp_path / "cli")
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    for name in ("summary.json", "report.md", "report.html", "plot_best_speedup.png",
                 "plot_bi_pass_rate.png"):
        assert (run / name).is_file(), name
    assert "report.html" in result.output
    assert len(json.loads((run / "summary.json").read_text())["cells"]) == 4


@pytest.mark.parametrize("setup, message", [
    ("missing", "holds no results.sqlite"),
    ("empty", "holds no finished task yet"),
    ("garbage", "cannot be read as a results database"),
    ("not-a-dir", "is not a directory"),
])
def test_unusable_run_directory_is_a_one_line_error(tmp_path: Path, setup: str, message: str) -> None:
    run = tmp_path / "run"
    if setup == "not-a-dir":
        run.write_text("")
    else:
        run.mkdir()
    if setup == "empty":
        Store(run / "results.sqlite").close()
    if setup == "garbage":
        (run / "results.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ReportError, match=message):
        write_reports(run)
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], result.output
    if setup == "missing":
        assert not (run / "results.sqlite").exists()  # reading a run never creates its database


def test_report_names_the_final_kernel_why_bi_failed_shape_times_and_provenance(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run")
    kernel = run_dir / "kernels" / "refine--baseline--replay" / "rms_norm.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("def rms_norm(x):\n    return x\n")
    timing = lambda ms: {"median_ms": ms, "q25_ms": ms * 0.9, "q75_ms": ms * 1.1, "n": 50}
    store = Store(run_dir / "results.sqlite")
    store.cache_evaluation("k", "refine/baseline/replay:rms_norm:3", "rms_norm", "cuda", {"benchmark": {
        "benchmark": {"shapes": [{"dims": {"T": 4, "H": 256}, "candidate": timing(0.01),
                                  "reference": timing(0.02), "speedup": 2.0,
                                  "baselines": {"torch_rms_norm": timing(0.008), "slow": timing(0.03)},
                                  "fastest_baseline": "torch_rms_norm", "production_speedup": 0.8}],
                      "production_speedup": 0.8}}})
    store.close()
    (run_dir / "provenance.jsonl").write_text(json.dumps({
        "started": "2026-01-01T00:00:00+00:00", "seconds": 61.0, "ended": "finished", "commit": "abc123",
        "agentloop": "0.1.0", "torch": "2.11.0", "triton": "3.6.0", "python": "3.11.7", "host": "h",
        "device": "cuda", "device_name": "NVIDIA H200"}) + "\n")
    write_reports(run_dir)
    md = (run_dir / "report.md").read_text()
    rms = md.split("### rms_norm")[1].split("### softmax")[0]
    link = "kernels/refine--baseline--replay/rms_norm.py"
    # Both speedups: over the reference and over the fastest production baseline.
    assert f"| refine / baseline | yes | no | 2.00× | 0.80× | #3 [{link}]({link}) |" in rms
    # The final kernel of refine/baseline failed the static gate's BI002 (the closing audit).
    assert "- refine / baseline: static BI002: BI002 fired here" in rms
    # evolve/baseline's final kernel (#2) failed the dynamic gate: which row, in which batch.
    assert ("- evolve / baseline: dynamic: output 0 row 1 differs bitwise in a batch of 16 (position 5) "
            "against a batch of 1") in rms
    assert ("| T=4 H=256 | 10 µs (IQR 2) | 20 µs (IQR 4) | 2.00× | torch_rms_norm 8 µs (IQR 1.6) "
            "| 0.80× |") in rms
    summary = json.loads((run_dir / "summary.json").read_text())
    cells = {(c["style"], c["mode"]): c for c in summary["cells"]}
    assert cells["refine", "baseline"]["geomean_production_speedup"] == pytest.approx(0.8)
    assert cells["refine", "baseline"]["geomean_speedup"] == pytest.approx(math.sqrt(2.0 * 0.8), abs=1e-4)
    assert cells["refine", "bi-aware"]["geomean_production_speedup"] is None
    assert "<td class=\"num\">0.80×</td>" in (run_dir / "report.html").read_text()
    assert ("2026-01-01T00:00:00+00:00, 61 s (finished): agentloop 0.1.0 at abc123, torch 2.11.0, "
            "triton 3.6.0, Python 3.11.7; cuda (NVIDIA H200) on h") in md
    assert f'<a href="{link}">' in (run_dir / "report.html").read_text()


def test_report_shows_device_warnings_rejections_seeds_and_a_partial_run(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run")
    store = Store(run_dir / "results.sqlite")
    final = store.query("SELECT final_candidate FROM task_results WHERE cell = 'refine/bi-aware/replay' "
                        "AND task = 'rms_norm'")[0]["final_candidate"]
    # A static warning on a final kernel that passed every gate: recorded, and shown in the report.
    store.add_gate_result(final, "static", True, True, 0.01, [
        {"rule": "BI005", "severity": "warning", "line": 12, "message": "tl.atomic_add accumulates in a "
         "run-dependent order", "hint": "reduce in a fixed order"}])
    store.close()
    (run_dir / "provenance.jsonl").write_text(json.dumps({
        "started": "2026-01-01T00:00:00+00:00", "seconds": 9.0, "ended": "stopped (SIGINT)", "device": "cpu",
        "device_name": "AMD EPYC"}) + "\n")
    (run_dir / "seeds.json").write_text(json.dumps({"refine/bi-aware/replay|rms_norm": [
        {"id": 7, "archive": "runs/archive.sqlite", "task": "rms_norm", "mode": "bi-aware",
         "device_name": "AMD EPYC", "speedup": 0.0123456789012345, "code": "...", "run_dir": "/r/old"}]}))
    summary = write_reports(run_dir)
    md = (run_dir / "report.md").read_text()
    html = (run_dir / "report.html").read_text()
    assert "- device: cpu (AMD EPYC)" in md and "cpu interpreter: not a GPU verdict" in md
    assert "Partial results: the run stopped (SIGINT)" in md and "Partial results" in html
    assert "BI pass (cpu interpreter)" in md and "24 candidates" in md
    rms = md.split("### rms_norm")[1].split("### softmax")[0]
    assert ("- refine / bi-aware: static BI005 line 12: tl.atomic_add accumulates in a run-dependent "
            "order") in rms
    assert "BI005" in html
    assert "- refine / bi-aware: archive kernel #7 (0.0123× on AMD EPYC, from /r/old;" in rms
    # Every rejected candidate of the task, with the stage that stopped it and its first finding.
    assert "| cell | candidate | gate | rule | finding |" in rms
    assert "| refine / bi-aware | #1 | static | BI001 | BI001 fired here |" in rms
    assert "| refine / bi-aware | #2 | dynamic | mismatch | rows differ bitwise: batch 16, position 5;" in rms
    assert "| refine / baseline | #1 | compile | error | SyntaxError: invalid syntax (line 3)" in rms
    assert "<td class=\"num\">#1</td><td>static</td><td><code>BI001</code></td>" in html
    assert summary["device"] == "cpu (AMD EPYC)" and summary["partial"] == "stopped (SIGINT)"


def test_bi_pass_rate_ignores_a_task_without_a_kernel(tmp_path: Path) -> None:
    # refine/bi-aware: rms_norm's final kernel passed the closing audit, softmax kept no kernel.
    loops = {k: v for k, v in LOOPS.items() if k[:2] == ("refine", "bi-aware")}
    summary = write_reports(make_run(tmp_path / "run", loops))
    (only,) = summary["cells"]
    assert (only["tasks"], only["correct"], only["bi_pass"], only["bi_pass_rate"]) == (2, 1, 1, 1.0)
    assert "1/1 (100%), 1 without a kernel" in (tmp_path / "run" / "report.md").read_text()
    none_kept = {("refine", "bi-aware", "softmax"): LOOPS["refine", "bi-aware", "softmax"]}
    summary = write_reports(make_run(tmp_path / "none", none_kept))
    assert summary["cells"][0]["bi_pass_rate"] is None
    assert "n/a (no kernel)" in (tmp_path / "none" / "report.md").read_text()
    from rich.console import Console

    from agentloop.campaign.run import summary_table

    console = Console(width=80, record=True)
    console.print(summary_table(summary))
    text = console.export_text()
    assert "n/a" in text and "device: cpu" in text and "not a GPU verdict" in text
