"""The PNG plots of a run's report, drawn with matplotlib's Agg renderer (no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch

PLOT_FILES = {"best_speedup": "plot_best_speedup.png", "bi_pass_rate": "plot_bi_pass_rate.png"}
MODE_COLOURS = {"baseline": "#d9822b", "bi-aware": "#2b6cb0"}
STYLE_COLOURS = ["#2f855a", "#805ad5", "#c53030", "#319795", "#b7791f", "#718096"]
"""One colour per style; mode is the line's dash (MODE_COLOURS are for the bar chart)."""
MODE_LINES = {"baseline": "--", "bi-aware": "-"}

Cell = tuple[str, str, str]
"""(style, mode, provider)."""


def eligible(c: dict[str, Any]) -> bool:
    """Whether a candidate could be its loop's final kernel: accepted and timed, and in bi-aware
    mode through both BI gates (as the loop's own choice of final kernel requires)."""
    if c["status"] != "accepted" or not c["speedup"] or c["speedup"] <= 0:
        return False
    return c["mode"] != "bi-aware" or (c["bi_static"] != 0 and c["bi_dynamic"] != 0)


def best_speedup_curves(candidates: list[dict[str, Any]],
                        task_results: list[dict[str, Any]]) -> dict[Cell, list[float | None]]:
    """Per cell, the best speedup so far after each candidate number: the geomean, over the cell's
    tasks that have an eligible candidate by then, of the fastest one up to that number (None
    while no task has one; a task without a kernel is left out, not counted as the reference's
    1.0x). Its last point is the cell's `geomean_speedup` in `summary.json`."""
    by_loop: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in candidates:
        by_loop.setdefault((c["cell"], c["task"]), []).append(c)
    cells: dict[Cell, list[str]] = {}
    cell_ids: dict[Cell, str] = {}
    for r in task_results:
        key = (r["style"], r["mode"], r["provider"])
        cells.setdefault(key, []).append(r["task"])
        cell_ids[key] = r["cell"]
    curves = {}
    for key, tasks in cells.items():
        loops = [by_loop.get((cell_ids[key], t), []) for t in tasks]
        length = max([c["iteration"] for loop in loops for c in loop] + [1])
        logs: list[list[float]] = [[] for _ in range(length)]
        for loop in loops:
            best = None
            for i in range(length):
                found = [c["speedup"] for c in loop if c["iteration"] == i + 1 and eligible(c)]
                best = max([*found, *([best] if best is not None else [])], default=None)
                if best is not None:
                    logs[i].append(math.log(best))
        curves[key] = [math.exp(sum(v) / len(v)) if v else None for v in logs]
    return curves


def plot_best_speedup(curves: dict[str, list[float | None]], path: Path, note: str = "") -> Path:
    """One line per cell label ("style / mode ..."): colour by style; baseline dashed with square
    hollow markers, bi-aware solid with round filled ones, and the legend says which is which."""
    fig = Figure(figsize=(8, 4.5), dpi=110, layout="constrained")
    ax = fig.subplots()
    styles = list(dict.fromkeys(label.split(" / ")[0] for label in curves))
    for label, ys in curves.items():
        parts = label.split(" / ")
        mode = parts[1] if len(parts) > 1 else ""
        colour = STYLE_COLOURS[styles.index(parts[0]) % len(STYLE_COLOURS)]
        ax.plot(range(1, len(ys) + 1), [y if y is not None else math.nan for y in ys],
                label=f"{label} ({'dashed' if mode == 'baseline' else 'solid'})",
                marker="s" if mode == "baseline" else "o", markersize=5, linewidth=2, color=colour,
                markerfacecolor="white" if mode == "baseline" else colour,
                linestyle=MODE_LINES.get(mode, "-"))
    ax.axhline(1.0, color="#888888", linewidth=1, linestyle=":", label="reference (1.0×)")
    values = [1.0, *(y for ys in curves.values() for y in ys if y is not None)]
    if max(values) / min(values) > 5:  # e.g. interpreter runs at ~0.01x beside the 1.0 line
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(lambda v, _: f"{v:g}×")
    ax.set_xlabel("candidate number in the loop")
    ax.set_ylabel("best speedup so far (geomean)")
    ax.set_title("Best speedup against iteration, geomean over the tasks with a kernel so far"
                 + (f"\n{note}" if note else ""), fontsize=10)
    length = max((len(ys) for ys in curves.values()), default=1)
    ax.set_xticks(range(1, length + 1))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best", title="style / mode", title_fontsize=8)
    fig.savefig(path)
    return path


def plot_bi_pass_rate(cells: list[tuple[str, str, int, int]], path: Path) -> Path:
    """One bar per (label, mode, bi_pass, tasks): the BI pass rate of the final kernels."""
    fig = Figure(figsize=(8, 4.5), dpi=110, layout="constrained")
    ax = fig.subplots()
    xs = range(len(cells))
    rates = [passed / tasks if tasks else 0.0 for _, _, passed, tasks in cells]
    bars = ax.bar(xs, rates, color=[MODE_COLOURS.get(mode, "#718096") for _, mode, _, _ in cells],
                  edgecolor="#333333", linewidth=0.6)
    for bar, (_, _, passed, tasks) in zip(bars, cells, strict=True):
        ax.annotate(f"{passed}/{tasks}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    ax.set_xticks(list(xs), [label.replace(" / ", "\n") for label, _, _, _ in cells], fontsize=8)
    ax.set_ylim(0, 1.3)
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_ylabel("BI pass rate (independent dynamic audit)")
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.set_title("BI pass rate of the final kernels per cell", fontsize=10)
    modes = {mode for _, mode, _, _ in cells}
    ax.legend(handles=[Patch(color=colour, label=mode) for mode, colour in MODE_COLOURS.items()
                       if mode in modes], fontsize=8, loc="upper right", ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.savefig(path)
    return path
