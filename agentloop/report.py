"""The reports of a run directory, built from its results database only (`DIR/results.sqlite`):
`summary.json` (SPEC.md §3), `report.md`, a self-contained `report.html` and PNG plots.

How the figures are scored:
- a cell is one (style, mode, provider); its `tasks` are the loops it finished;
- `correct`: tasks whose loop kept a final kernel (correct and benchmarked; in bi-aware mode
  also through both BI gates);
- `bi_pass`: tasks whose final kernel passed the independent dynamic audit at the end of the
  loop, whatever the mode; a task without a final kernel does not pass, so
  `bi_pass_rate = bi_pass / tasks`;
- `geomean_speedup`: geometric mean over the cell's tasks of the final kernel's speedup over the
  reference, where a task without a correct final kernel counts as 1.0 (the user keeps the
  reference), so a cell is not flattered by the tasks it failed;
- `retention[style]`: geomean speedup of the bi-aware cell over the baseline cell of that style
  (only for styles run in both modes; keyed "style/provider" when a run used several providers).
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
from pydantic import BaseModel

from agentloop.plots import PLOT_FILES, best_speedup_curves, plot_best_speedup, plot_bi_pass_rate
from agentloop.store import Store

RESULTS = "results.sqlite"
MODES = ("baseline", "bi-aware")
GATE_ORDER = ("extract", "compile", "static", "dynamic", "correctness", "benchmark")


class ReportError(ValueError):
    """A run directory the reports cannot be built from; the message is one line."""


class CellSummary(BaseModel):
    """One cell of `summary.json`: exactly the keys of SPEC.md §3."""

    style: str
    mode: str
    provider: str
    tasks: int
    correct: int
    bi_pass: int
    bi_pass_rate: float
    geomean_speedup: float
    llm_calls: int
    input_tokens: int
    output_tokens: int


class Summary(BaseModel):
    """`summary.json`."""

    campaign: str
    cells: list[CellSummary]
    retention: dict[str, float]


def geomean(values: list[float]) -> float:
    """Geometric mean of positive values (1.0 for none)."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0


def significant(value: float, digits: int = 5) -> float:
    """`value` rounded to `digits` significant digits (speedups span 0.01x to 10x)."""
    return float(f"{value:.{digits}g}")


def task_speedup(row: dict[str, Any]) -> float:
    """The speedup a task contributes to its cell: the final kernel's, or 1.0 without one."""
    speedup = row.get("speedup")
    return float(speedup) if row["correct"] and speedup and speedup > 0 else 1.0


class RunData(BaseModel):
    """Everything the reports read from a run directory."""

    name: str
    campaign: dict[str, Any]
    task_results: list[dict[str, Any]]
    candidates: list[dict[str, Any]]
    gate_results: list[dict[str, Any]]

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
        finally:
            store.close()
    except sqlite3.DatabaseError as exc:
        raise ReportError(f"{db} cannot be read as a results database ({exc})") from None
    if not tasks:
        raise ReportError(f"{db} holds no finished task yet; run or resume the campaign first")
    for g in gates:
        g["findings"] = json.loads(g["findings"] or "[]")
        g["counterexample"] = json.loads(g["counterexample"]) if g["counterexample"] else None
    return RunData(name=name, campaign=campaign, task_results=tasks, candidates=candidates,
                   gate_results=gates)


def summarize(run: RunData) -> Summary:
    """The figures of `summary.json`."""
    cells, exact = [], {}
    for key in run.cell_keys():
        rows = [r for r in run.task_results if (r["style"], r["mode"], r["provider"]) == key]
        # Retention uses the unrounded geomeans: off-GPU speedups are ~0.01x, where rounding shows.
        exact[key] = geomean([task_speedup(r) for r in rows])
        bi_pass = sum(bool(r["bi_pass"]) for r in rows)
        cells.append(CellSummary(
            style=key[0], mode=key[1], provider=key[2], tasks=len(rows),
            correct=sum(bool(r["correct"]) for r in rows), bi_pass=bi_pass,
            bi_pass_rate=round(bi_pass / len(rows), 4), geomean_speedup=significant(exact[key]),
            llm_calls=sum(r["llm_calls"] for r in rows), input_tokens=sum(r["input_tokens"] for r in rows),
            output_tokens=sum(r["output_tokens"] for r in rows)))
    providers = {c.provider for c in cells}
    retention = {}
    for style, provider in dict.fromkeys((c.style, c.provider) for c in cells):
        base, aware = exact.get((style, "baseline", provider)), exact.get((style, "bi-aware", provider))
        if base and aware:
            retention[style if len(providers) == 1 else f"{style}/{provider}"] = significant(aware / base)
    return Summary(campaign=run.name, cells=cells, retention=retention)


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


def fmt_speedup(value: float | None) -> str:
    if value is None:
        return "-"
    # Off-GPU (Triton's interpreter) speedups are ~0.01x: keep three significant digits there.
    return f"{value:.2f}×" if value >= 0.1 else f"{value:.3g}×"


def cell_label(style: str, mode: str, provider: str, providers: int) -> str:
    return f"{style} / {mode}" + (f" / {provider}" if providers > 1 else "")


def per_task(run: RunData) -> list[dict[str, Any]]:
    """One table per task: how each cell did on it."""
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
            rows.append({
                "cell": cell_label(*key, providers), "mode": key[1], "correct": bool(r["correct"]),
                "bi_pass": bool(r["bi_pass"]),
                "speedup": fmt_speedup(r["speedup"] if r["correct"] else None),
                "final": f"#{final['iteration']}" if final else "-",
                "candidates": tried[r["cell"], task], "accepted": accepted[r["cell"], task],
                "llm_calls": r["llm_calls"], "wall_s": f"{r['wall_s']:.1f}"})
        tables.append({"task": task, "rows": rows})
    return tables


def report_context(run: RunData, summary: Summary, plots: dict[str, Path]) -> dict[str, Any]:
    """What both report templates render."""
    providers = len({c.provider for c in summary.cells})
    cells = [{**c.model_dump(), "label": cell_label(c.style, c.mode, c.provider, providers),
              "speedup": fmt_speedup(c.geomean_speedup),
              "correct_rate": f"{c.correct}/{c.tasks} ({c.correct / c.tasks:.0%})",
              "bi_rate": f"{c.bi_pass}/{c.tasks} ({c.bi_pass_rate:.0%})",
              "tokens": c.input_tokens + c.output_tokens} for c in summary.cells]
    geo = {(c.style, c.mode, c.provider): c.geomean_speedup for c in summary.cells}
    retention = []
    for key, value in summary.retention.items():
        style, _, provider = key.partition("/")
        provider = provider or summary.cells[0].provider
        retention.append({"style": key, "baseline": fmt_speedup(geo[style, "baseline", provider]),
                          "bi_aware": fmt_speedup(geo[style, "bi-aware", provider]),
                          "retention": f"{value:.2f}"})
    rejected, observed = rejections(run)
    c = run.campaign
    setup = {k: c[k] for k in ("model", "device", "seed") if c.get(k) is not None}
    if isinstance(c.get("budget"), dict):
        setup["budget"] = ", ".join(f"{k} {v}" for k, v in c["budget"].items() if v is not None)
    return {"name": run.name, "setup": setup, "cells": cells, "retention": retention,
            "tasks": run.task_names(), "candidates": len(run.candidates),
            "per_task": per_task(run), "rejected": rejected, "observed": observed, "modes": MODES,
            "plots": [{"file": p.name, "title": title, "data_uri": "data:image/png;base64,"
                       + base64.b64encode(p.read_bytes()).decode()} for title, p in plots.items()]}


def templates() -> Environment:
    env = Environment(loader=PackageLoader("agentloop", "templates"), undefined=StrictUndefined,
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
            run_dir / PLOT_FILES["best_speedup"]),
        "BI pass rate of the final kernels, per cell": plot_bi_pass_rate(
            [(cell_label(c.style, c.mode, c.provider, providers), c.mode, c.bi_pass, c.tasks)
             for c in summary.cells], run_dir / PLOT_FILES["bi_pass_rate"]),
    }
    context = report_context(run, summary, plots)
    env = templates()
    (run_dir / "report.md").write_text(env.get_template("report.md.j2").render(context))
    (run_dir / "report.html").write_text(env.get_template("report.html.j2").render(context))
    return summary.model_dump()
