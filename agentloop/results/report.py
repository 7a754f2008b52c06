"""The reports of a run directory, built from its results database only (`DIR/results.sqlite`):
`summary.json` (docs/reference/files.md), `report.md`, a self-contained `report.html` and PNG plots.

How the figures are scored:
- a cell is one (style, mode, provider); its `tasks` are the loops it finished;
- `correct`: tasks whose loop kept a final kernel (correct and benchmarked; in bi-aware mode
  also through both BI gates);
- `bi_pass`: tasks whose final kernel passed the independent dynamic audit at the end of the
  loop, whatever the mode; `bi_pass_rate = bi_pass / correct`, over the tasks that kept a final
  kernel (a task without one has nothing to audit: it is counted in `failed`, not as a BI
  failure; null when no task kept one);
- `failed`: tasks without a correct final kernel, counted apart from the speedups;
- `geomean_speedup`: geometric mean of the final kernel's speedup over the reference, over the
  cell's *correct* tasks only (null when it has none): a failed task is not a 1.0x success, which
  on a CPU (interpreter kernels at ~0.01x) would make a cell that failed everything look best;
- `geomean_production_speedup`: the same over the fastest production baseline (per shape, the
  baseline with the lowest median; `BenchmarkResult.production_speedup`), over the correct tasks
  whose final kernel was timed against one (null when none was);
- `retention[style]`: geomean, over the tasks correct in *both* the baseline and the bi-aware cell
  of that style, of bi-aware speedup over baseline speedup (only for styles run in both modes;
  keyed "style/provider" when a run used several providers); the reports list those tasks and
  the two geomeans on them.

Speedups measured on a CPU compare Triton's interpreter with native torch: the reports say so,
and say they are not a measure of kernel speed.
"""

from __future__ import annotations

import base64
import json
import math
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from pydantic import BaseModel, Field

from agentloop.results.archive import SEEDS
from agentloop.results.plots import PLOT_FILES, best_speedup_curves, plot_best_speedup, plot_bi_pass_rate
from agentloop.results.store import Store, kernel_file

RESULTS = "results.sqlite"
MODES = ("baseline", "bi-aware")
GATE_ORDER = ("extract", "compile", "static", "dynamic", "correctness", "benchmark")
INTERPRETED_NOTE_SHORT = "CPU run: Triton's interpreter against native torch; not a measure of kernel speed"
CPU_VERDICTS = ("cpu interpreter: not a GPU verdict. BI and correctness verdicts were measured in "
                "Triton's CPU interpreter (tl.dot rounds by a row's tile position there, atomics run one "
                "at a time, bf16 hides one-ulp differences); a kernel that passes here can be "
                "batch-variant on a GPU, and the reverse")


class ReportError(ValueError):
    """A run directory the reports cannot be built from; the message is one line."""


class CellSummary(BaseModel):
    """One cell of `summary.json`: exactly the keys the interface promises (`failed` is for the reports)."""

    style: str
    mode: str
    provider: str
    tasks: int
    correct: int
    bi_pass: int
    bi_pass_rate: float | None
    """bi_pass / correct: over the tasks that kept a final kernel; None when none did."""
    geomean_speedup: float | None
    """Over the cell's correct tasks; None when it has none."""
    geomean_production_speedup: float | None = None
    """Geomean speedup of the final kernels over the fastest production baseline at each shape
    (docs/benchmark.md), over the correct tasks whose final kernel was timed against one; None
    when none was. Above 1: faster than what a serving engine runs today."""
    llm_calls: int
    input_tokens: int
    output_tokens: int
    failed: int = Field(default=0, exclude=True)
    """Tasks without a correct final kernel (in the reports; summary.json has the spec's keys)."""


class Comparison(BaseModel):
    """Baseline against bi-aware for one style, over the tasks correct in both cells."""

    tasks: list[str]
    baseline_geomean: float | None
    bi_aware_geomean: float | None
    retention: float | None


class Summary(BaseModel):
    """`summary.json`."""

    campaign: str
    cells: list[CellSummary]
    retention: dict[str, float]
    comparison: dict[str, Comparison] = Field(default_factory=dict, exclude=True)
    """Per style, the tasks correct in both modes and the geomeans on them (in the reports)."""
    device: str = Field(default="", exclude=True)
    """Where the run evaluated its kernels, e.g. "cpu (Triton interpreter)" (in the reports)."""
    partial: str = Field(default="", exclude=True)
    """Why the run's results are incomplete ("stopped (SIGINT)"); empty when it finished."""


def geomean(values: list[float]) -> float:
    """Geometric mean of positive values (1.0 for none)."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0


def significant(value: float, digits: int = 5) -> float:
    """`value` rounded to `digits` significant digits (speedups span 0.01x to 10x)."""
    return float(f"{value:.{digits}g}")


def task_speedup(row: dict[str, Any]) -> float | None:
    """The final kernel's speedup, or None for a task without a correct, timed one."""
    speedup = row.get("speedup")
    return float(speedup) if row["correct"] and speedup and speedup > 0 else None


class RunData(BaseModel):
    """Everything the reports read from a run directory."""

    name: str
    campaign: dict[str, Any]
    task_results: list[dict[str, Any]]
    candidates: list[dict[str, Any]]
    gate_results: list[dict[str, Any]]
    benchmarks: dict[str, list[dict[str, Any]]] = {}
    """Per-shape timings (median and quartiles) of each benchmarked kernel, by code hash and task
    ("hash|task"), from the evaluation cache."""
    production: dict[str, float] = {}
    """Speedup over the fastest production baseline of each benchmarked kernel that has one, by
    "hash|task"."""
    provenance: list[dict[str, Any]] = []
    """One entry per `agentloop run` on the directory (provenance.jsonl)."""
    seeds: dict[str, list[dict[str, Any]]] = {}
    """The archived kernels each loop started from, by loop ("cell|task"; seeds.json)."""
    timed_on: dict[str, int] = {}
    """Benchmarks in the evaluation cache, by the name of the device that timed them."""
    kernels: set[str] = set()
    """Final kernel files present in the directory, relative to it."""

    def cell_keys(self) -> list[tuple[str, str, str]]:
        """(style, mode, provider) of every cell, in the campaign's order of styles and modes."""
        styles = [s for s in self.campaign.get("styles") or [] if isinstance(s, str)]
        keys = {(r["style"], r["mode"], r["provider"]) for r in self.task_results}
        rank = lambda k: (styles.index(k[0]) if k[0] in styles else len(styles), k[0],
                          MODES.index(k[1]) if k[1] in MODES else len(MODES), k[1], k[2])
        return sorted(keys, key=rank)

    def task_names(self) -> list[str]:
        listed = self.campaign.get("tasks")
        order = listed if isinstance(listed, list) else []
        names = {r["task"] for r in self.task_results}
        return sorted(names, key=lambda t: (order.index(t) if t in order else len(order), t))


def load_run(run_dir: Path, campaign_name: str | None = None) -> RunData:
    """Read a run directory's results database and campaign file."""
    db = run_dir / RESULTS
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a directory; give a run directory (it holds {RESULTS})")
    if not db.is_file():
        raise ReportError(f"{run_dir} holds no {RESULTS}; give the directory that `agentloop run` wrote")
    campaign: dict[str, Any] = {}
    if (run_dir / "campaign.yaml").is_file():
        try:
            loaded = yaml.safe_load((run_dir / "campaign.yaml").read_text())
        except yaml.YAMLError:
            loaded = None  # the campaign file only names the run and orders it; the results stand alone
        campaign = loaded if isinstance(loaded, dict) else {}
    name = campaign_name or str(campaign.get("name") or run_dir.resolve().name)
    try:
        store = Store(db)
        try:
            tasks = store.task_results()
            candidates = store.candidates()
            gates = store.query("SELECT * FROM gate_results ORDER BY candidate_id")
            cached = store.query("SELECT hash, task, result FROM evaluations")
        finally:
            store.close()
    except sqlite3.DatabaseError as exc:
        raise ReportError(f"{db} cannot be read as a results database ({exc})") from None
    if not tasks:
        raise ReportError(f"{db} holds no finished task yet; run or resume the campaign first")
    for g in gates:
        g["findings"] = json.loads(g["findings"] or "[]")
        g["counterexample"] = json.loads(g["counterexample"]) if g["counterexample"] else None
    benchmarks, production = {}, {}
    timed_on: Counter[str] = Counter()
    for row in cached:
        bench = (json.loads(row["result"]).get("benchmark") or {}).get("benchmark") or {}
        if bench.get("shapes"):
            benchmarks[f"{row['hash']}|{row['task']}"] = bench["shapes"]
            timed_on[bench.get("device_name") or "unnamed device"] += 1
        if (bench.get("production_speedup") or 0) > 0:
            production[f"{row['hash']}|{row['task']}"] = float(bench["production_speedup"])
    provenance = []
    if (run_dir / "provenance.jsonl").is_file():
        for line in (run_dir / "provenance.jsonl").read_text().splitlines():
            try:
                provenance.append(json.loads(line))
            except ValueError:
                continue
    kernels = {str(p.relative_to(run_dir)) for p in run_dir.glob("kernels/*/*.py")}
    seeds: dict[str, list[dict[str, Any]]] = {}
    try:
        saved = json.loads((run_dir / SEEDS).read_text()) if (run_dir / SEEDS).is_file() else {}
    except (OSError, ValueError):
        saved = {}
    if isinstance(saved, dict):
        seeds = {str(k): [s for s in v if isinstance(s, dict)] for k, v in saved.items()
                 if isinstance(v, list) and v}
    return RunData(name=name, campaign=campaign, task_results=tasks, candidates=candidates,
                   gate_results=gates, benchmarks=benchmarks, production=production, provenance=provenance,
                   seeds=seeds, kernels=kernels, timed_on=dict(timed_on))


def production_speedup(run: RunData, row: dict[str, Any]) -> float | None:
    """The final kernel's speedup over the fastest production baseline, for a correct task whose
    final kernel was timed against one."""
    if task_speedup(row) is None or row["final_candidate"] is None:
        return None
    final = next((c for c in run.candidates if c["id"] == row["final_candidate"]), None)
    return run.production.get(f"{final['hash']}|{row['task']}") if final else None


def summarize(run: RunData) -> Summary:
    """The figures of `summary.json`."""
    cells, speedups = [], {}
    for key in run.cell_keys():
        rows = [r for r in run.task_results if (r["style"], r["mode"], r["provider"]) == key]
        speedups[key] = {r["task"]: v for r in rows if (v := task_speedup(r)) is not None}
        production = [v for r in rows if (v := production_speedup(run, r)) is not None]
        bi_pass = sum(bool(r["bi_pass"]) for r in rows)
        correct = sum(bool(r["correct"]) for r in rows)
        geo = geomean(list(speedups[key].values())) if speedups[key] else None
        cells.append(CellSummary(
            style=key[0], mode=key[1], provider=key[2], tasks=len(rows), correct=correct,
            failed=len(rows) - correct, bi_pass=bi_pass,
            bi_pass_rate=round(bi_pass / correct, 4) if correct else None,
            geomean_speedup=significant(geo) if geo is not None else None,
            geomean_production_speedup=significant(geomean(production)) if production else None,
            llm_calls=sum(r["llm_calls"] for r in rows), input_tokens=sum(r["input_tokens"] for r in rows),
            output_tokens=sum(r["output_tokens"] for r in rows)))
    providers = {c.provider for c in cells}
    retention, comparison = {}, {}
    for style, provider in dict.fromkeys((c.style, c.provider) for c in cells):
        base, aware = speedups.get((style, "baseline", provider)), speedups.get((style, "bi-aware", provider))
        if base is None or aware is None:
            continue
        name = style if len(providers) == 1 else f"{style}/{provider}"
        common = [t for t in run.task_names() if t in base and t in aware]
        # Unrounded ratios: off-GPU speedups are ~0.01x, where rounding shows.
        ratio = geomean([aware[t] / base[t] for t in common]) if common else None
        geo_base, geo_aware = (significant(geomean([v[t] for t in common])) if common else None
                               for v in (base, aware))
        comparison[name] = Comparison(tasks=common, baseline_geomean=geo_base, bi_aware_geomean=geo_aware,
                                      retention=significant(ratio) if ratio is not None else None)
        if ratio is not None:
            retention[name] = significant(ratio)
    return Summary(campaign=run.name, cells=cells, retention=retention, comparison=comparison,
                   device=device_line(run), partial=partial(run))


def failure_reason(gate: dict[str, Any]) -> tuple[str, str]:
    """(rule, example) of a failed gate result: its first error finding, else what failed."""
    finding = next((f for f in gate["findings"] if f.get("severity") == "error"), None)
    if finding:
        return finding["rule"], finding.get("message", "")
    if gate["counterexample"]:
        ce = gate["counterexample"]
        return "mismatch", (f"rows differ bitwise: batch {ce.get('batch_size')}, position "
                            f"{ce.get('position')}; {ce.get('context', '')}").rstrip("; ")
    if gate["error"]:
        return "error", gate["error"]
    return "-", ""


def reason_table(entries: list[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
    """Counts of (gate, rule) per mode, from (gate, rule, mode, example) entries."""
    counts: Counter[tuple[str, str, str]] = Counter()
    examples: dict[tuple[str, str], str] = {}
    for gate, rule, mode, example in entries:
        counts[gate, rule, mode] += 1
        examples.setdefault((gate, rule), example)
    rows = []
    for (gate, rule), example in examples.items():
        per_mode = {m: counts[gate, rule, m] for m in MODES}
        rows.append({"gate": gate, "rule": rule, "example": shorten(example), **per_mode,
                     "total": sum(counts[k] for k in counts if k[:2] == (gate, rule))})
    rank = lambda r: (GATE_ORDER.index(r["gate"]) if r["gate"] in GATE_ORDER else len(GATE_ORDER),
                      -r["total"], r["rule"])
    return sorted(rows, key=rank)


def rejections(run: RunData) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Why candidates were rejected (by the stage that stopped them and its rule), and which BI
    gates failed without rejecting (baseline mode only observes them)."""
    by_candidate: dict[int, list[dict[str, Any]]] = {}
    for g in run.gate_results:
        by_candidate.setdefault(g["candidate_id"], []).append(g)
    rejected, observed = [], []
    for c in run.candidates:
        gates = by_candidate.get(c["id"], [])
        if c["status"] == "rejected":
            stage = c["rejected_by"] or "-"
            failed = next((g for g in gates if g["gate"] == stage and not g["passed"]), None)
            rule, example = failure_reason(failed) if failed else ("-", "")
            if stage == "extract":
                example = "no code in the answer"
            rejected.append((stage, c["rule"] or rule, c["mode"], example))
        for g in gates:
            if not g["passed"] and not g["enforced"]:
                rule, example = failure_reason(g)
                observed.append((g["gate"], rule, c["mode"], example))
    return reason_table(rejected), reason_table(observed)


def shorten(text: str, limit: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plural(n: int, word: str) -> str:
    """ "1 candidate", "2 candidates"."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def fmt_speedup(value: float | None) -> str:
    if value is None or value <= 0:
        return "-"
    # Off-GPU (Triton's interpreter) speedups are ~0.01x: keep three significant digits there.
    return f"{value:.2f}×" if value >= 0.1 else f"{value:.3g}×"


def cell_label(style: str, mode: str, provider: str, providers: int) -> str:
    return f"{style} / {mode}" + (f" / {provider}" if providers > 1 else "")


def bi_failure(run: RunData, candidate_id: int) -> str:
    """Why a final kernel failed the BI audit: the dynamic gate's counterexample (which output,
    row, batch) or its error, else the static gate's first error finding."""
    gates = {g["gate"]: g for g in run.gate_results if g["candidate_id"] == candidate_id}
    dynamic, static = gates.get("dynamic"), gates.get("static")
    if dynamic and not dynamic["passed"]:
        ce = dynamic["counterexample"]
        if ce:
            diff = ce.get("max_abs_diff")
            return (f"dynamic: output {ce.get('output')} row {ce.get('row')} differs bitwise in a batch of "
                    f"{ce.get('batch_size')} (position {ce.get('position')}) against a batch of "
                    f"{ce.get('reference_batch_size')}; max abs diff "
                    f"{f'{diff:.3g}' if isinstance(diff, (int, float)) else 'inf or NaN'}, "
                    f"{ce.get('mismatched_elements')} elements"
                    + (f"; {ce['context']}" if ce.get("context") else ""))
        rule, example = failure_reason(dynamic)
        return f"dynamic: {rule}: {example}" if example else f"dynamic: {rule}"
    if static and not static["passed"]:
        rule, example = failure_reason(static)
        return f"static {rule}: {example}"
    return "the closing dynamic audit failed"


def fmt_us(timing: dict[str, Any] | None) -> str:
    """A timing's median and interquartile range in microseconds."""
    if not timing or not timing.get("n") or timing.get("median_ms", -1) < 0:
        return "-"
    us = lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}"
    return f"{us(timing['median_ms'] * 1000)} µs (IQR {us((timing['q75_ms'] - timing['q25_ms']) * 1000)})"


def shape_times(run: RunData, final: dict[str, Any]) -> list[dict[str, str]]:
    """Per-shape times of a final kernel: candidate and reference median (IQR) and speedup."""
    rows = []
    for s in run.benchmarks.get(f"{final['hash']}|{final['task']}", []):
        dims = " ".join(f"{k}={v}" for k, v in (s.get("dims") or {}).items())
        speedup = s.get("speedup")
        fastest = s.get("fastest_baseline")
        baseline = (s.get("baselines") or {}).get(fastest) if fastest else None
        rows.append({"shape": dims, "candidate": fmt_us(s.get("candidate")),
                     "reference": fmt_us(s.get("reference")),
                     "speedup": fmt_speedup(speedup if speedup and speedup > 0 else None),
                     "baseline": f"{fastest} {fmt_us(baseline)}" if fastest else "-",
                     "production_speedup": fmt_speedup(s.get("production_speedup"))})
    return rows


def per_task(run: RunData) -> list[dict[str, Any]]:
    """One table per task: how each cell did on it, its final kernel (file, why BI failed,
    per-shape times)."""
    by_id = {c["id"]: c for c in run.candidates}
    tried = Counter((c["cell"], c["task"]) for c in run.candidates)
    accepted = Counter((c["cell"], c["task"]) for c in run.candidates if c["status"] == "accepted")
    providers = len({k[2] for k in run.cell_keys()})
    tables = []
    for task in run.task_names():
        rows = []
        for key in run.cell_keys():
            r = next((r for r in run.task_results if r["task"] == task
                      and (r["style"], r["mode"], r["provider"]) == key), None)
            if r is None:
                continue
            final = by_id.get(r["final_candidate"]) if r["final_candidate"] is not None else None
            path = kernel_file(r["cell"], task) if final else None
            rows.append({
                "cell": cell_label(*key, providers), "mode": key[1], "correct": bool(r["correct"]),
                "bi_pass": bool(r["bi_pass"]),
                "speedup": fmt_speedup(r["speedup"] if r["correct"] else None),
                "production_speedup": fmt_speedup(production_speedup(run, r)),
                "final": f"#{final['iteration']}" if final else "-",
                "kernel": path if path in run.kernels else None,
                "bi_why": bi_failure(run, final["id"]) if final and not r["bi_pass"] else "",
                "warnings": kernel_warnings(run, final["id"]) if final else [],
                "seeds": seed_lines(run, r["cell"], task),
                "shapes": shape_times(run, final) if final else [],
                "candidates": tried[r["cell"], task], "accepted": accepted[r["cell"], task],
                "llm_calls": r["llm_calls"], "wall_s": f"{r['wall_s']:.1f}"})
        tables.append({"task": task, "rows": rows, "rejected": rejected_candidates(run, task, providers)})
    return tables


def kernel_warnings(run: RunData, candidate_id: int) -> list[str]:
    """Every warning finding of a final kernel's gate results ("static BI005 line 12: ..."), and
    the error findings of gates that only observed it (baseline mode)."""
    out = []
    for g in run.gate_results:
        if g["candidate_id"] != candidate_id:
            continue
        for f in g["findings"]:
            if f.get("severity") == "warning" or (not g["enforced"] and f.get("severity") == "error"):
                where = f" line {f['line']}" if f.get("line") else ""
                text = f"{g['gate']} {f.get('rule', '-')}{where}: {shorten(f.get('message', ''), 200)}"
                if text not in out:
                    out.append(text)
    return out


def rejected_candidates(run: RunData, task: str, providers: int) -> list[dict[str, str]]:
    """A task's rejected candidates, in each cell's order: the stage that stopped each and its
    first finding (rule and a short message)."""
    by_candidate: dict[int, list[dict[str, Any]]] = {}
    for g in run.gate_results:
        by_candidate.setdefault(g["candidate_id"], []).append(g)
    order = {k: i for i, k in enumerate(run.cell_keys())}
    rows = []
    for c in sorted((c for c in run.candidates if c["task"] == task and c["status"] == "rejected"),
                    key=lambda c: (order.get((c["style"], c["mode"], c["provider"]), len(order)),
                                   c["iteration"], c["id"])):
        stage = c["rejected_by"] or "-"
        failed = next((g for g in by_candidate.get(c["id"], []) if g["gate"] == stage and not g["passed"]),
                      None)
        rule, message = failure_reason(failed) if failed else ("-", "")
        if stage == "extract":
            message = "no code in the answer"
        rows.append({"cell": cell_label(c["style"], c["mode"], c["provider"], providers),
                     "candidate": f"#{c['iteration']}", "gate": stage, "rule": c["rule"] or rule,
                     "message": shorten(message, 120)})
    return rows


def seed_lines(run: RunData, cell: str, task: str) -> list[str]:
    """The archived kernels a loop started from: archive id, speedup and the run it came from."""
    lines = []
    for s in run.seeds.get(f"{cell}|{task}", []):
        speed = fmt_speedup(s.get("speedup")) if isinstance(s.get("speedup"), (int, float)) else "-"
        lines.append(f"archive kernel #{s.get('id', '?')} ({speed} on {s.get('device_name') or '-'}, "
                     f"from {s.get('run_dir') or '-'}; {s.get('archive') or '-'})")
    return lines


def device_line(run: RunData) -> str:
    """Where the run evaluated its kernels: the device type and name its provenance recorded."""
    seen = list(dict.fromkeys(f"{p.get('device', '?')} ({p.get('device_name') or '-'})"
                              for p in run.provenance if p.get("device")))
    if not seen:
        return str(run.campaign.get("device") or "")
    return ", ".join(seen)


def partial(run: RunData) -> str:
    """Why the results are incomplete: the last `agentloop run` on the directory stopped (Ctrl-C,
    SIGTERM, --until-idle) and no later run finished it; empty when it finished."""
    if not run.provenance:
        return ""
    ended = str(run.provenance[-1].get("ended") or "")
    return "" if ended in ("", "finished") else ended


def provenance_lines(run: RunData) -> list[str]:
    """One line per `agentloop run` on the directory: date, duration, code, versions, device."""
    lines = []
    for p in run.provenance:
        lines.append(f"{p.get('started', '?')}, {p.get('seconds', 0):.0f} s ({p.get('ended', '?')}): "
                     f"agentloop {p.get('agentloop', '-')} at {p.get('commit', '-')}, "
                     f"torch {p.get('torch', '-')}, "
                     f"triton {p.get('triton', '-')}, Python {p.get('python', '-')}; {p.get('device', '-')} "
                     f"({p.get('device_name', '-')}) on {p.get('host', '-')}")
    return lines


def timed_on_line(run: RunData) -> str:
    """Which device types timed the run's benchmarks: speedups are only compared within one."""
    if not run.timed_on:
        return ""
    kinds = ", ".join(f"{name} ({n})" for name, n in sorted(run.timed_on.items(), key=lambda x: -x[1]))
    if len(run.timed_on) == 1:
        return f"Benchmarks timed on {kinds}; speedups are only compared within one device type."
    return (f"Benchmarks timed on several device types: {kinds}. Speedups are only comparable within one "
            "device type (a cluster run times every benchmark on one type, `cluster.timing_device`); "
            "this directory mixes runs on different devices.")


def interpreted(run: RunData) -> bool:
    """Whether the kernels were timed on a CPU, through Triton's interpreter."""
    devices = {p.get("device") for p in run.provenance} | {run.campaign.get("device")}
    return "cpu" in devices


def bi_rate(c: CellSummary) -> str:
    """ "1/1 (100%), 1 without a kernel": over the tasks that kept a final kernel."""
    if not c.correct:
        return "n/a (no kernel)"
    rate = f"{c.bi_pass}/{c.correct} ({c.bi_pass / c.correct:.0%})"
    return rate + (f", {c.failed} without a kernel" if c.failed else "")


def report_context(run: RunData, summary: Summary, plots: dict[str, Path]) -> dict[str, Any]:
    """What both report templates render."""
    providers = len({c.provider for c in summary.cells})
    cells = [{**c.model_dump(), "failed": c.failed,
              "label": cell_label(c.style, c.mode, c.provider, providers),
              "speedup": fmt_speedup(c.geomean_speedup),
              "production_speedup": fmt_speedup(c.geomean_production_speedup),
              "correct_rate": f"{c.correct}/{c.tasks} ({c.correct / c.tasks:.0%})",
              "bi_rate": bi_rate(c),
              "tokens": c.input_tokens + c.output_tokens} for c in summary.cells]
    retention = [{"style": key, "tasks": len(comp.tasks), "task_names": ", ".join(comp.tasks),
                  "baseline": fmt_speedup(comp.baseline_geomean),
                  "bi_aware": fmt_speedup(comp.bi_aware_geomean),
                  "retention": f"{comp.retention:.2f}" if comp.retention is not None else "-"}
                 for key, comp in summary.comparison.items()]
    rejected, observed = rejections(run)
    c = run.campaign
    setup = {k: c[k] for k in ("model", "seed") if c.get(k) is not None}  # the device: its own line
    if isinstance(c.get("budget"), dict):
        setup["budget"] = ", ".join(f"{k} {v}" for k, v in c["budget"].items() if v is not None)
    seconds = sum(p.get("seconds", 0) for p in run.provenance)
    return {"name": run.name, "setup": setup, "cells": cells, "retention": retention,
            "tasks": run.task_names(), "candidates": plural(len(run.candidates), "candidate"),
            "cell_count": plural(len(cells), "cell"), "device": summary.device,
            "cpu_verdicts": CPU_VERDICTS if interpreted(run) else "", "partial": summary.partial,
            "bi_note": any(c.failed for c in summary.cells),
            "interpreted": interpreted(run), "provenance": provenance_lines(run),
            "timed_on": timed_on_line(run),
            "duration": f"{seconds:.0f} s over {len(run.provenance)} run(s)" if run.provenance else "",
            "per_task": per_task(run), "rejected": rejected, "observed": observed, "modes": MODES,
            "plots": [{"file": p.name, "title": title, "data_uri": "data:image/png;base64,"
                       + base64.b64encode(p.read_bytes()).decode()} for title, p in plots.items()]}


def templates() -> Environment:
    env = Environment(loader=PackageLoader("agentloop.results", "templates"), undefined=StrictUndefined,
                      autoescape=select_autoescape(enabled_extensions=("html.j2",)),
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    # A markdown table cell holds one line and no unescaped pipe.
    env.filters["md"] = lambda v: " ".join(str(v).split()).replace("|", "\\|")
    return env


def write_reports(run_dir: Path, campaign_name: str | None = None) -> dict:
    """Write `summary.json`, the plots, `report.md` and `report.html` into `run_dir` from its
    `results.sqlite`; the summary as a dict. Raises ReportError (one line) for an unusable dir."""
    run_dir = Path(run_dir)
    run = load_run(run_dir, campaign_name)
    summary = summarize(run)
    (run_dir / "summary.json").write_text(json.dumps(summary.model_dump(), indent=2) + "\n")
    providers = len({c.provider for c in summary.cells})
    curves = best_speedup_curves(run.candidates, run.task_results)
    plots = {
        "Best speedup so far, per style and mode": plot_best_speedup(
            {cell_label(*k, providers): curves[k] for k in run.cell_keys()},
            run_dir / PLOT_FILES["best_speedup"],
            note=INTERPRETED_NOTE_SHORT if interpreted(run) else ""),
        "BI pass rate of the final kernels, per cell": plot_bi_pass_rate(
            [(cell_label(c.style, c.mode, c.provider, providers), c.mode, c.bi_pass, c.tasks)
             for c in summary.cells], run_dir / PLOT_FILES["bi_pass_rate"]),
    }
    context = report_context(run, summary, plots)
    env = templates()
    (run_dir / "report.md").write_text(env.get_template("report.md.j2").render(context))
    (run_dir / "report.html").write_text(env.get_template("report.html.j2").render(context))
    return {**summary.model_dump(), "device": summary.device, "partial": summary.partial}
