"""Verdicts and latency of the static gate per candidate over the whole corpus.

Usage: python bench/static_gate.py [--repeat 5]

First the confusion matrix against each candidate's trusted GPU label (the measurement, else the
expected label while the GPU measurement is pending): per label, how many candidates get an error
(rejected), only warnings (possible hazards, left to the dynamic gate), or nothing; the false
rejects and the variant candidates without an error are listed. Then each candidate is analysed
`--repeat` times after one warm-up pass; its latency is the median of those runs. Prints the
median and p95 over candidates, in wall-clock time and in CPU time of this process (the latter is
what to compare on a machine shared with other work). Targets: median <= 20 ms, p95 <= 100 ms;
false rejects <= 5% of invariant candidates.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from gates.contract import load_suite
from gates.corpus import load_manifest, manifest_path
from gates.static import static_gate


def corpus() -> list[tuple[str, str, object, str]]:
    """(name, source, task, trusted GPU label) for every candidate in every manifest of the suite."""
    out = []
    for task in load_suite().values():
        if not manifest_path(task).is_file():
            continue
        for entry in load_manifest(task).candidates:
            path = task.candidates_dir / entry.file
            label = "disputed" if entry.disputed else entry.measured_gpu_label
            out.append((f"{task.name}/{entry.file}", path.read_text(), task, label))
    return out


def confusion(items: list[tuple[str, str, object, str]]) -> None:
    """Print, per label, the candidates with an error, with warnings only, and with nothing."""
    cells: dict[str, dict[str, list[str]]] = {}
    for name, source, task, label in items:
        severities = {f.severity for f in static_gate(source, task, name).findings}
        verdict = "error" if "error" in severities else "warning" if severities else "clean"
        cells.setdefault(label, {"error": [], "warning": [], "clean": []})[verdict].append(name)
    print("static gate verdicts against the trusted GPU labels:")
    for label in ("invariant", "variant", "broken", "disputed"):
        if label in cells:
            row = cells[label]
            n = sum(len(v) for v in row.values())
            print(f"  {label:9} {n:3}: error {len(row['error']):3} ({len(row['error']) / n:4.0%})   "
                  f"warning only {len(row['warning']):3}   clean {len(row['clean']):3}")
    inv, var = cells.get("invariant", {}), cells.get("variant", {})
    for name in inv.get("error", []):
        print(f"  false reject: {name}")
    for name in var.get("warning", []) + var.get("clean", []):
        print(f"  variant without an error (left to the dynamic gate): {name}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per candidate (median kept)")
    args = parser.parse_args()
    items = corpus()
    confusion(items)  # also the warm-up: imports, caches, the task's reference module
    wall, cpu = [], []
    slowest = ("", 0.0)
    for name, source, task, _ in items:
        w, c = [], []
        for _ in range(args.repeat):
            t0, p0 = time.perf_counter(), time.process_time()
            static_gate(source, task, name)
            w.append(time.perf_counter() - t0)
            c.append(time.process_time() - p0)
        wall.append(statistics.median(w) * 1000)
        cpu.append(statistics.median(c) * 1000)
        if wall[-1] > slowest[1]:
            slowest = (name, wall[-1])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"static gate over {len(items)} corpus candidates ({args.repeat} runs each, median kept; "
          f"load average {load:.1f} on {os.cpu_count()} cores)")
    print(f"  wall: median {statistics.median(wall):6.1f} ms   p95 {percentile(wall, 0.95):6.1f} ms   "
          f"max {max(wall):6.1f} ms ({slowest[0]})")
    print(f"  cpu:  median {statistics.median(cpu):6.1f} ms   p95 {percentile(cpu, 0.95):6.1f} ms")
    print("  targets: median <= 20 ms, p95 <= 100 ms")


if __name__ == "__main__":
    main()
